"""One bench run: load the trace, build the policies, replay, measure, write."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional

from bench.config import BenchSettings
from bench.metrics import Slo, summarize, windows
from bench.report import write_results
from bench.sim import CostModel, SimSettings, TimelineSampler, build_simulator, records_of
from bench.traces import load_trace

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


def run_bench(settings: BenchSettings, out_dir: Optional[Path] = None,
              progress: Optional[bool] = None) -> dict[str, Any]:
    """Replay ``settings.trace`` and return (and, with ``out_dir``, write) the results."""
    t0 = time.perf_counter()
    trace = load_trace(settings.trace, settings.data_root)
    cost = CostModel(settings.accelerator, settings.model_profile)
    sim_settings = SimSettings.resolve(settings.sim, settings.accelerator, settings.model_profile, cost)
    load_s = time.perf_counter() - t0
    for line in settings.describe():
        log.info("bench: %s", line)
    log.info("bench: %s: %d requests (%.0f s of arrivals), KV pool %d tokens, %d request slots",
             trace.name, len(trace.requests), trace.duration_s, sim_settings.capacity,
             sim_settings.max_running_requests)

    sim = build_simulator(trace, cost, sim_settings, order=settings.build("policy"),
                          eviction=settings.build("cache"), admission=settings.build("admission"))
    sampler = TimelineSampler(settings.metrics.timeline_dt_s)
    bar = _Progress(len(trace.requests), settings.output.progress if progress is None else progress,
                    desc=trace.name)
    sim.on_sample, sim.on_final = sampler, bar
    t1 = time.perf_counter()
    try:
        sim.run()
    finally:
        bar.close()
    replay_s = time.perf_counter() - t1

    records = records_of(sim)
    timeline = sampler.timeline(sim_settings.capacity)
    slo = Slo(settings.metrics.ttft_slo_s, settings.metrics.tpot_slo_s)
    result = {
        "meta": {
            "trace": trace.name, "trace_source": trace.source, "trace_notes": list(trace.notes),
            "accelerator": settings.accelerator.name, "model": settings.model_profile.name,
            "policies": {g: s.to_json() for g, s in settings.policies.items()},
            "sim": asdict(sim_settings), "iterations": sim.num_iterations,
            "decode_steps": sim.running.step, "simulated_s": sim.now,
            "evicted_tokens": sim.cache.num_evicted_tokens,
            "load_wall_s": load_s, "replay_wall_s": replay_s,
        },
        "summary": summarize(records, slo, timeline),
        "windows": windows(records, slo, settings.metrics.window_s, timeline),
    }
    if out_dir is not None:
        write_results(out_dir, result, records, timeline, settings.output)
        log.info("bench: results in %s", out_dir)
    return result
