"""Plugin overhead, live: the CPU server with Switchboard's hooks vs stock SGLang, one workload.

    python -m bench.scripts.plugin_overhead                    # ~15 min (2 cores); writes bench/results/plugin_overhead.md
    python -m bench.scripts.plugin_overhead --rounds 1 --window 8 --out /tmp/overhead.md   # a quick look

Servers (all ``model.dtype=float32``, the same SGLang arguments):

* ``stock sglang``: ``python -m sglang.launch_server`` with the exact argv
  Switchboard's launcher builds and its CPU environment, but no plan: our
  plugin loads and stays inert (no hook, no middleware), so every class is
  SGLang's own.
* ``switchboard``: ``python -m server``: the Scheduler hook, the overload
  middleware and the session middleware installed; no policy chosen.
* ``switchboard baselines``: ``python -m server +policy=fcfs +cache=lru
  +admission=max_queue admission.max_waiting=1000000``: eviction through the
  eviction seam (LRU, on SGLang's Python radix-tree core, which any custom
  eviction needs), every arrival through the admission gate (never refusing);
  ``fcfs`` maps to SGLang's own ``--schedule-policy fcfs`` (no order seam).

Workload: a window of the Azure conversation trace, shaped for SmolLM2-135M
as in ``validate_sim`` and sent at trace speed, which saturates the CPU
server (the queue grows through the window), so output throughput measures
the server's capacity and TTFT its queueing. Rounds alternate the servers
(A, B, C, A, B, C, ...) so drift on the shared machine hits each alike; the
table reports the median over rounds and each ratio to stock SGLang, with
the spread. Goal: every ratio >= 0.98x (TTFT: stock / ours).

NOTE: one of the few bench modules that import ``server/`` (allowed by
``tests/config/test_boundaries.py``): stock SGLang must get exactly the argv and
environment the server builds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.config import compose_bench, resolve_bench
from bench.live.server import ServerProcess
from bench.run import run_bench
from bench.scripts.common import add_output_args, git_commit, model_source
from bench.scripts.validate_sim import _machine

SERVER = ("model.dtype=float32",)
BASELINES = ("+policy=fcfs", "+cache=lru", "+admission=max_queue", "admission.max_waiting=1000000")
WORKLOAD = ("trace=azure_conversation", "trace.window_start_s=600", "accelerator=cpu",
            "model_profile=smollm2-135m", "live.api=generate", "live.input_scale=0.0625",
            "live.output_scale=0.125", "live.max_input_tokens=1024", "live.max_output_tokens=128",
            "output.progress=false")
GOAL = 0.98
#: (label, summary key, sub-key, higher is better)
METRICS = (("output throughput (tok/s)", "throughput_output_tps", None, True),
           ("TTFT mean (s)", "ttft_s", "mean", False), ("TTFT p50 (s)", "ttft_s", "p50", False),
           ("TPOT mean (ms)", "tpot_s", "mean", False))


class StockSGLang(ServerProcess):
    """SGLang's own launcher with Switchboard's argv and CPU environment, without a plan."""

    def command(self) -> tuple[list[str], dict[str, str]]:
        from compose.config import compose
        from compose.model import ensure_default_model
        from compose.schema import register_schemas
        from server.resolve import resolve
        from server.sglang.launch.args import sglang_fields, to_argv
        from server.sglang.launch.env import PLAN_ENV, child_env

        register_schemas()
        cfg = compose(self.overrides)
        plan = resolve(cfg)
        model = ensure_default_model(model_source(cfg))
        plan = plan.with_model_path(str(model))
        _, base_env = super().command()
        env = child_env(plan, Path("unused"), base_env)
        del env[PLAN_ENV]  # NOTE: without a plan our plugin is inert (server/sglang/launch/plugin.py)
        return [sys.executable, "-m", "sglang.launch_server", *to_argv(sglang_fields(plan))], env


SERVERS = {"stock sglang": (StockSGLang, SERVER), "switchboard": (ServerProcess, SERVER),
           "switchboard baselines": (ServerProcess, SERVER + BASELINES)}


def one_run(name: str, workload: list[str], results: Path) -> dict[str, Any]:
    kind, overrides = SERVERS[name]
    results.mkdir(parents=True, exist_ok=True)
    with kind(list(overrides), results / "server.log") as server:
        summary: dict[str, Any] = run_bench(resolve_bench(compose_bench([*workload, f"live.endpoint={server.base_url}"])),
                            results / "bench")["summary"]
    return summary


def metric(summary: dict[str, Any], key: str, sub: str | None) -> float:
    v = summary[key]
    return float(v[sub] if sub is not None else v)


def render(runs: dict[str, list[dict[str, Any]]], workload: list[str], rounds: int, window_s: float, wall_s: float) -> str:
    lines = ["# Plugin overhead, live (CPU server)", "",
             f"Produced by `python -m bench.scripts.plugin_overhead --rounds {rounds} "
             f"--window {window_s:g}` at commit {git_commit()} on {_machine()}, "
             f"{wall_s / 60:.0f} min wall. Servers and method: see the script's docstring; "
             f"median over {rounds} alternating rounds, [min, max] of the per-round ratio in brackets. "
             f"Goal: every ratio >= {GOAL}x (for times: stock / ours).", "",
             "Workload: `python -m bench " + " ".join(workload) + " live.endpoint=<server>`", "",
             "| server | " + " | ".join(m[0] for m in METRICS) + " | requests finished |",
             "|---|" + "---|" * (len(METRICS) + 1)]
    base = runs["stock sglang"]
    verdict = []
    for name, summaries in runs.items():
        cells = []
        for label, key, sub, higher in METRICS:
            vals = [metric(s, key, sub) for s in summaries]
            scale = 1e3 if label.endswith("(ms)") else 1.0
            cell = f"{statistics.median(vals) * scale:.3g}"
            if name != "stock sglang":
                ratios = [(v / b if higher else b / v) for v, b in
                          zip(vals, (metric(s, key, sub) for s in base))]
                med = statistics.median(ratios)
                cell += f" ({med:.3f}x [{min(ratios):.3f}, {max(ratios):.3f}])"
                verdict.append((name, label, med))
            cells.append(cell)
        finished = "/".join(str(s["finished"]) for s in summaries)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {finished} |")
    missed = [f"{n}: {label} {r:.3f}x" for n, label, r in verdict if r < GOAL]
    lines += ["", "Verdict: " + (f"every median ratio >= {GOAL}x." if not missed else
                                  "below the goal: " + "; ".join(missed) + ".")]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=float, default=10.0, help="seconds of the trace window (from 600 s)")
    add_output_args(ap, "plugin_overhead", "plugin_overhead")
    args = ap.parse_args()
    git_commit()  # NOTE: stamps the run now (cached), before any work
    workload = [*WORKLOAD, f"trace.window_end_s={600 + args.window:g}"]
    t0 = time.monotonic()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in SERVERS}
    for i in range(args.rounds):
        for name in SERVERS:
            s = one_run(name, workload, args.results / f"round{i}" / name.replace(" ", "_"))
            runs[name].append(s)
            print(f"round {i} {name}: " + ", ".join(
                f"{label} {metric(s, key, sub):.4g}" for label, key, sub, _ in METRICS), flush=True)
    table = render(runs, workload, args.rounds, args.window, time.monotonic() - t0)
    (args.results / "runs.json").write_text(json.dumps(runs, indent=1, default=str))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table)
    print(table)


if __name__ == "__main__":
    main()
