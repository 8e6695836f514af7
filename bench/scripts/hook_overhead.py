"""Hook overhead from inside, live: Switchboard's share of the scheduler's time, per kind.

    python -m bench.scripts.hook_overhead                 # ~10 min (2 cores); writes bench/results/hook_overhead.md
    python -m bench.scripts.hook_overhead --window 8 --only none fairway --out /tmp/hooks.md   # a quick look

One CPU server per option at its defaults (``model.dtype=float32``), each
under the same saturating workload (``plugin_overhead``'s Azure window, sent at
trace speed: the queue grows through it). Before and after the workload the
server's ``/metrics`` is read once its figures hold still; the table reports
what the hook clock (``server/sglang/scheduling/hook_clock.py``) counted in
between: busy scheduler iterations, their wall time, and the time spent in
Switchboard's hooks, in total and by hook. Target (issue 26, item 6): hooks
<= 1% of busy iteration time at defaults.

What the clock does not separate (so the share is a lower bound there): a
kind's checks inside SGLang's prefill adder (admission's gate stop, the gap
cache's gap restore), SGLang's own batch building inside the dLLM round
walk, and the rest of the caches that replace SGLang's radix tree as a
whole (the gap cache of ``+cache=penelope``, HiState's snapshot cache): their
eviction ranks are timed (``timed_ranks.py``), their tree work, which
SGLang's tree would do too, is not (``cache_overhead.md`` compares the gap
cache with SGLang's). Kinds whose work is outside the scheduler (decisions' scoring pass,
the tier cache's backup thread) are not rows.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from bench.config import compose_bench, resolve_bench
from bench.live.chat import metrics_text, series_total, wait_still
from bench.live.server import ServerProcess
from bench.run import run_bench
from bench.scripts.common import add_output_args, git_commit
from bench.scripts.plugin_overhead import SERVER, WORKLOAD
from bench.scripts.validate_sim import _machine

#: (row label, the server's overrides beyond ``SERVER``): each option at its defaults.
OPTIONS = (
    ("none", ()),
    ("fairway", ("+policy=fairway",)),
    ("leap", ("+policy=leap",)),
    ("penelope", ("+cache=penelope",)),
    ("basin", ("+admission=basin",)),
    ("max_queue", ("+admission=max_queue",)),
)
HOOKS = ("arrival", "order", "batch_formed", "batch_finished", "finished", "eviction", "dllm_rounds")
TARGET = 0.01
"""Hooks' share of busy scheduler time at defaults (issue 26, item 6)."""


def counts(url: str) -> dict[str, float]:
    """The hook clock's counters, from one read of ``/metrics``."""
    text = metrics_text(url)
    out = {f"s:{h}": series_total(text, "switchboard_hook_seconds_total", {"hook": h}) for h in HOOKS}
    out |= {f"n:{h}": series_total(text, "switchboard_hook_calls_total", {"hook": h}) for h in HOOKS}
    out["busy_s"] = series_total(text, "switchboard_scheduler_busy_seconds_total")
    out["busy_n"] = series_total(text, "switchboard_scheduler_busy_iterations_total")
    return out


def quiet_counts(url: str) -> dict[str, float]:
    """The counters once they hold still for 2 s (the clock pushes at most once a second)."""
    return wait_still(lambda: counts(url), hold_s=2.0, timeout=120.0, what=f"{url}: the hook clock's counters")


def one_option(label: str, overrides: tuple[str, ...], workload: list[str], results: Path) -> dict[str, Any]:
    """Serve the workload on one option's server; the counters' growth and the bench summary."""
    results.mkdir(parents=True, exist_ok=True)
    with ServerProcess([*SERVER, *overrides], results / "server.log") as server:
        before = quiet_counts(server.base_url)
        summary = run_bench(resolve_bench(compose_bench([*workload, f"live.endpoint={server.base_url}"])),
                            results / "bench")["summary"]
        after = quiet_counts(server.base_url)
    grown = {k: after[k] - before[k] for k in after}
    return {"label": label, "overrides": list(overrides), "grown": grown, "finished": summary["finished"],
            "requests": summary["requests"]}


def share(row: dict[str, Any]) -> float:
    """Hook seconds / busy iteration seconds."""
    g = row["grown"]
    return sum(g[f"s:{h}"] for h in HOOKS) / g["busy_s"] if g["busy_s"] > 0 else float("nan")


def render(rows: list[dict[str, Any]], workload: list[str], window_s: float, wall_s: float) -> str:
    lines = ["# Hook overhead from inside, live (CPU server)", "",
             f"Produced by `python -m bench.scripts.hook_overhead --window {window_s:g}` at commit "
             f"{git_commit()} on {_machine()}, {wall_s / 60:.0f} min wall. Each option at its defaults on "
             "its own server; Switchboard's hook clock (`switchboard_hook_seconds_total{hook}` and "
             "`switchboard_scheduler_busy_seconds_total` on `/metrics`) read before and after one "
             "saturating workload. What the clock leaves out: see the script's docstring. "
             f"Target: hooks <= {TARGET:.0%} of busy iteration time.", "",
             "Workload: `python -m bench " + " ".join(workload) + " live.endpoint=<server>`", "",
             "| option | busy iterations | busy time (s) | hook time (ms) | per iteration (µs) | share | "
             "largest hooks (share of busy time) | finished | target |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        g = row["grown"]
        hook_s = sum(g[f"s:{h}"] for h in HOOKS)
        top = sorted((h for h in HOOKS if g[f"n:{h}"] > 0), key=lambda h: -g[f"s:{h}"])[:3]
        tops = ", ".join(f"{h} {g[f's:{h}'] / g['busy_s']:.3%} ({g[f'n:{h}']:.0f} calls)" for h in top)
        s = share(row)
        lines.append(f"| {row['label']} (`{' '.join(row['overrides']) or 'no kind'}`) | {g['busy_n']:.0f} | "
                     f"{g['busy_s']:.1f} | {hook_s * 1e3:.1f} | {hook_s / max(g['busy_n'], 1) * 1e6:.0f} | "
                     f"{s:.3%} | {tops} | {row['finished']}/{row['requests']} | "
                     f"{'met' if s <= TARGET else 'NOT met'} |")
    missed = [r["label"] for r in rows if not share(r) <= TARGET]
    lines += ["", "Verdict: " + (f"every option's hooks take <= {TARGET:.0%} of the scheduler's busy time."
                                  if not missed else "above the target: " + ", ".join(missed) + ".")]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=float, default=20.0, help="seconds of the trace window (from 600 s)")
    ap.add_argument("--only", nargs="*", help="option labels to run (default: every one)")
    add_output_args(ap, "hook_overhead", "hook_overhead")
    args = ap.parse_args()
    git_commit()  # NOTE: stamps the run now (cached), before any work
    workload = [*WORKLOAD, f"trace.window_end_s={600 + args.window:g}"]
    t0 = time.monotonic()
    rows = []
    for label, overrides in OPTIONS:
        if args.only and label not in args.only:
            continue
        rows.append(one_option(label, overrides, workload, args.results / label))
        print(f"{label}: share {share(rows[-1]):.3%}, busy {rows[-1]['grown']['busy_n']:.0f} iterations", flush=True)
    (args.results / "rows.json").write_text(json.dumps(rows, indent=1))
    table = render(rows, workload, args.window, time.monotonic() - t0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table)
    print(table)


if __name__ == "__main__":
    main()
