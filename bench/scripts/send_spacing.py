"""How far apart the live client's requests reach the server within a burst -> ``bench/results/send_spacing.md``.

    python -m bench.scripts.send_spacing        # ~6 min: one CPU server, one live replay

``sim.send_interval_s`` models a client sending one request after another: a
burst of requests that share one trace timestamp reaches the server spread out,
and an idle scheduler prefills the first alone. This script reads the value
from a live replay of a Mooncake window that no other table replays (from
1,800 s; the validation table's is from 600 s, so the simulator's error there
is not tuned away): the live client (SGLang's ``bench_serving`` request
function, ``bench/live/sender.py``) against a fresh CPU server, shaped and
time-scaled as the validation case. Within each burst (requests with one
trace time), the gap between consecutive requests' send times is one sample;
the table reports their distribution and the value ``conf``'s schema ships
(``bench/schema.py``: ``SimConfig.send_interval_s``), and fails (``--check``)
when the shipped value is not the measured median rounded to 0.1 ms.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from bench.config import compose_bench, resolve_bench
from bench.live.server import ServerProcess
from bench.run import prepare_trace, run_bench
from bench.schema import SimConfig
from bench.scripts.common import add_output_args, git_commit
from bench.sim import CostModel, SimSettings

#: The measured window: Mooncake's conversation trace from 1,800 s, as the
#: validation case shapes it (``validate_sim.CASES``), 10x slower.
WINDOW = ("trace=mooncake_conversation", "trace.window_start_s=1800", "trace.window_end_s=1830",
          "trace.time_scale=10", "live.input_scale=0.03125", "live.output_scale=0.125",
          "live.max_input_tokens=2048", "live.max_output_tokens=128",
          "accelerator=cpu", "model_profile=smollm2-135m", "live.api=generate", "output.progress=false")


def burst_gaps(trace_times: dict[str, float], sent: Iterable[tuple[str, float]]) -> list[float]:
    """Gaps between consecutive send times within each burst (requests of one trace time).

    NOTE: requests are taken in send order within a burst; a burst of one gives no gap."""
    bursts: dict[float, list[float]] = {}
    for rid, at in sent:
        bursts.setdefault(trace_times[rid], []).append(at)
    ordered = [sorted(times) for times in bursts.values()]
    return [b - a for times in ordered for a, b in zip(times, times[1:])]


def measure(results: Path) -> tuple[list[float], int, int]:
    """The within-burst gaps of one live replay, the number of bursts and of requests."""
    results.mkdir(parents=True, exist_ok=True)
    settings = resolve_bench(compose_bench(list(WINDOW)))
    with ServerProcess(["model.dtype=float32"], results / "server.log") as server:
        live = resolve_bench(compose_bench([*WINDOW, f"live.endpoint={server.base_url}"]))
        out = run_bench(live, results / "live")
    cost = CostModel(settings.accelerator, settings.model_profile)
    trace, _ = prepare_trace(settings, SimSettings.resolve(settings.sim, settings.accelerator,
                                                           settings.model_profile, cost))
    times = {r.rid: r.arrival_s for r in trace.requests if r.after is None}
    sent = [(r.rid, r.arrival_s) for r in out["records"] if r.rid in times]
    return burst_gaps(times, sent), len(set(times.values())), len(sent)


def rounded_median(gaps: list[float]) -> float:
    """The median gap rounded to 0.1 ms: the value ``sim.send_interval_s`` should ship."""
    return round(float(np.median(gaps)), 4)


def render(gaps: list[float], bursts: int, requests: int, commit: str) -> str:
    q = np.percentile(gaps, [10, 50, 90]) * 1e3
    shipped = SimConfig.send_interval_s
    return "\n".join([
        "# The live client's spacing within a burst (`sim.send_interval_s`)", "",
        f"Produced by `python -m bench.scripts.send_spacing` at commit {commit} ({datetime.now(UTC):%Y-%m-%d}). "
        "Live replay of Mooncake's conversation trace, 30 s from 1,800 s (a window no other table replays), "
        "10x slower, shaped as the validation case, against a fresh CPU server "
        "(`python -m server model.dtype=float32`); the client is SGLang's `bench_serving` request function. "
        "A burst is the requests of one trace time; each gap is between two consecutive send times in one "
        "burst.", "",
        "| requests | bursts | gaps | p10 | median | p90 | shipped `sim.send_interval_s` |",
        "|---|---|---|---|---|---|---|",
        f"| {requests} | {bursts} | {len(gaps)} | {q[0]:.3f} ms | {q[1]:.3f} ms | {q[2]:.3f} ms | "
        f"{shipped * 1e3:g} ms |", "",
        "The simulator ships the median rounded to 0.1 ms; `--check` fails when it does not. "
        "Why it matters and how it moved the validation: docs/evaluation.md, \"Found since\".", ""])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_output_args(ap, "send_spacing", "send-spacing")
    ap.add_argument("--check", action="store_true", help="exit 1 when the shipped value is not the median")
    args = ap.parse_args()
    commit = git_commit()  # NOTE: stamped before any work
    gaps, bursts, requests = measure(args.results)
    if not gaps:
        raise SystemExit("no burst of two or more requests in the window")
    args.out.write_text(render(gaps, bursts, requests, commit))
    print(f"wrote {args.out}; median gap {np.median(gaps) * 1e3:.3f} ms", flush=True)
    if args.check and rounded_median(gaps) != SimConfig.send_interval_s:
        print(f"bench/schema.py ships sim.send_interval_s={SimConfig.send_interval_s:g}; "
              f"measured {rounded_median(gaps):g}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
