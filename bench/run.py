"""One bench run: load and shape the trace, replay it (simulated or live), measure, write.

Both modes score the same ``RequestRecord``s with the same metrics and write the
same results folder. ``meta.mode`` says which ran: ``sim`` (the simulator over
the cost model) or ``live`` (real requests to ``live.endpoint``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.config import BenchSettings
from bench.metrics import RequestRecord, Slo, Timeline, summarize, windows
from bench.report import write_results
from bench.sim import CostModel, SimSettings
from bench.sim.servers import simulate
from bench.traces import Trace, load_trace
from bench.traces.shape import Shape, ShapedTrace, ShapeError, shape_trace
from compose.config import ConfigError

log = logging.getLogger("switchboard.bench")


class _Progress:
    """A tqdm bar over requests reaching a final state (updated in batches)."""

    def __init__(self, total: int, enabled: bool, desc: str) -> None:
        self.bar = None
        self.pending = 0
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, unit="req", disable=None, mininterval=0.5)

    def __call__(self, _request: Any) -> None:
        if self.bar is not None:
            self.pending += 1
            if self.pending >= 64:
                self.bar.update(self.pending)
                self.pending = 0

    def close(self) -> None:
        if self.bar is not None:
            self.bar.update(self.pending)
            self.bar.close()


def shape_of(settings: BenchSettings) -> Shape:
    """The ``live.*`` length fields."""
    live = settings.live
    return Shape(live.input_scale, live.output_scale, live.max_input_tokens, live.max_output_tokens)


def prepare_trace(settings: BenchSettings, sim_settings: SimSettings) -> tuple[Trace, ShapedTrace | None]:
    """The trace to replay: loaded, windowed, time-scaled, then shaped (``live.*``)
    unless this is a simulation with the identity shape (replayed as loaded).
    Raises ``ConfigError`` for a scale the trace's blocks cannot take."""
    trace = load_trace(settings.trace, settings.data_root)
    shape = shape_of(settings)
    if shape.is_identity and not settings.is_live:
        return trace, None
    # NOTE: the simulator's own fit rule (``Simulator._arrive``): prompt + output
    # must stay below the context length and 3 slots below the KV pool, so no
    # kept request is ever clipped or aborted by the simulator or the server.
    limit = min(sim_settings.context_length - 1, sim_settings.capacity - 3)
    try:
        shaped = shape_trace(trace, shape, limit)
    except ShapeError as exc:
        raise ConfigError(str(exc)) from exc
    return shaped.trace, shaped


def run_bench(settings: BenchSettings, out_dir: Path | None = None,
              progress: bool | None = None) -> dict[str, Any]:
    """Replay ``settings.trace`` and return (and, with ``out_dir``, write) the results.

    Where a gateway kind's deployment replayed it over several servers, the
    result also holds the ``bench.sim.cluster.Cluster`` (``result["cluster"]``:
    routing calls, replica of every request, from ``meta["cluster"]``), which
    is not written; ``replicas.csv`` in ``out_dir`` has each request's replica.
    ``result["records"]`` holds every request's ``RequestRecord`` (written as
    ``requests.csv``, rounded, when ``out_dir`` is given)."""
    t0 = time.perf_counter()
    cost = CostModel(settings.accelerator, settings.model_profile)
    sim_settings = SimSettings.resolve(settings.sim, settings.accelerator, settings.model_profile, cost)
    trace, shaped = prepare_trace(settings, sim_settings)
    load_s = time.perf_counter() - t0
    show = settings.output.progress if progress is None else progress
    if not settings.is_live:
        for line in settings.describe():
            log.info("bench: %s", line)
    log.info("bench: %s: %d requests (%.0f s of arrivals)%s", trace.name, len(trace.requests),
             trace.duration_s, f", {trace.notes[-1]}" if shaped is not None else "")

    t1 = time.perf_counter()
    if settings.is_live:
        records, timeline, mode_meta = _live(settings, trace, show)
    else:
        bar = _Progress(len(trace.requests), show, desc=trace.name)
        try:
            records, timeline, mode_meta = simulate(settings, trace, cost, sim_settings, bar)
        finally:
            bar.close()
    replay_s = time.perf_counter() - t1
    cluster = mode_meta.pop("cluster", None)

    slo = Slo(settings.metrics.ttft_slo_s, settings.metrics.tpot_slo_s)
    result: dict[str, Any] = {
        "meta": {
            "mode": "live" if settings.is_live else "sim",
            "trace": trace.name, "trace_source": trace.source, "trace_notes": list(trace.notes),
            "accelerator": settings.accelerator.name, "model": settings.model_profile.name,
            "policies": {g: s.chosen() for g, s in settings.policies.items()},
            "shape": None if shaped is None else {
                **asdict(shape_of(settings)), "block_size": trace.block_size,
                "max_total_tokens": shaped.max_total_tokens,
                "dropped_too_long": shaped.dropped_too_long,
                "dropped_followers": shaped.dropped_followers},
            **mode_meta,
            "load_wall_s": load_s, "replay_wall_s": replay_s,
        },
        "summary": summarize(records, slo, timeline),
        "windows": windows(records, slo, settings.metrics.window_s, timeline),
    }
    if out_dir is not None:
        write_results(out_dir, result, records, timeline, settings.output)
        if cluster is not None and settings.output.requests_csv:
            # NOTE: the replica column of requests.csv, kept apart (``RequestRecord`` has none)
            (out_dir / "replicas.csv").write_text(
                "rid,replica\n" + "".join(f"{rid},{i}\n" for rid, i in cluster.assignment.items()))
        log.info("bench: results in %s", out_dir)
    if cluster is not None:
        result["cluster"] = cluster  # NOTE: for callers (the routing table's script); never written
    result["records"] = records  # NOTE: for callers (tests/sim/test_golden.py); never written
    return result


def _live(settings: BenchSettings, trace: Trace,
          show: bool) -> tuple[list[RequestRecord], Timeline, dict[str, Any]]:
    from bench.live.replay import replay_live

    live = settings.live
    high = live.token_id_high if live.token_id_high is not None else settings.model_profile.vocab_size
    log.info("bench: live replay against %s (%s API); the server's own policies decide",
             live.endpoint, live.api.value)
    run = replay_live(trace, live, high, progress=show)
    return run.records, run.timeline, {"live": run.meta}
