"""The simulator's replay speed for every option on the 12k-request Mooncake hour -> ``replay_speed.md``.

    python -m bench.scripts.replay_speed                # ~3 min; writes bench/results/replay_speed.md
    python -m bench.scripts.replay_speed --only policy  # one group

Every option of every kind the request simulator hosts, each one replay of the
whole Mooncake conversation hour (12,031 requests, 3,537 s of arrivals) at trace
speed on one H100 with Llama-3.1-8B, in this one process, so on one core and one
after another. At trace speed the H100 is about 3x overloaded (thousands wait),
so an order ranks a queue of thousands at every pass: the slow end of what the
simulator does. Reported: ``meta.replay_wall_s`` (the event loop; loading the
trace is timed apart, ``meta.load_wall_s``). What an option needs beyond the
trace is added to its row (a hybrid model for ``histate``, an SSD directory for
the tiers, replicas for a router). Target (issue 26, item 6): <= 30 s each.

Not rows: ``+policy=dwise`` (the dLLM simulator replays shaped windows, not this
hour: ``dwise.md``), ``+adapters`` (its traffic names adapters: ``adapters.md``)
and ``+decisions`` (decision calls have their own simulator: ``decisions_sim.md``).
"""

from __future__ import annotations

import argparse
import platform
import time
from datetime import UTC, datetime
from typing import Any

from bench.config import compose_bench, resolve_bench
from bench.run import run_bench
from bench.scripts.baselines import COMMON
from bench.scripts.common import add_output_args, git_commit
from bench.scripts.validate_sim import _machine
from bench.traces.paths import REPO_ROOT

HOUR = ("trace=mooncake_conversation", *COMMON)
TARGET_S = 30.0
#: What a group's options need beyond the trace (the ``+<group>=<option>`` override comes first).
NEEDS: dict[str, tuple[str, ...]] = {
    "tier": ("tier.ssd_dir=/ssd", "tier.ssd_gb=200"),
    "router": ("sim.replicas=4",),
}
#: An option's own needs (by ``group/option``).
OPTION_NEEDS: dict[str, tuple[str, ...]] = {
    "cache/histate": ("sim.hybrid.enabled=true", "cache.snapshot_gb=50"),
}
#: Options that are not rows, and why (module docs).
SKIPPED = {
    "policy/dwise": "the dLLM simulator replays shaped windows, not this hour (dwise.md)",
}
SKIPPED_GROUPS = {
    "adapters": "its traffic names adapters (adapters.md)",
    "decisions": "decision calls have their own simulator (decisions_sim.md)",
}
GROUPS = ("policy", "cache", "admission", "speculative", "tier", "router")


def options() -> list[tuple[str, list[str]]]:
    """(row label, overrides) for SGLang as configured and every option of every hosted group."""
    rows: list[tuple[str, list[str]]] = [("SGLang as configured (no kind)", [])]
    for group in GROUPS:
        for path in sorted((REPO_ROOT / "conf" / group).glob("*.yaml")):
            name = f"{group}/{path.stem}"
            if name not in SKIPPED:
                rows.append((name, [f"+{group}={path.stem}", *NEEDS.get(group, ()), *OPTION_NEEDS.get(name, ())]))
    return rows


def replay(overrides: list[str], results: Any) -> dict[str, Any]:
    """One replay of the hour; its wall times and request count, or the error that stopped it."""
    settings = resolve_bench(compose_bench([*HOUR, *overrides, "output.progress=false", "output.plots=false",
                                            "output.requests_csv=false"]))
    out = run_bench(settings, results)
    return {"replay_s": out["meta"]["replay_wall_s"], "load_s": out["meta"]["load_wall_s"],
            "requests": out["summary"]["requests"], "finished": out["summary"]["finished"]}


def render(rows: list[tuple[str, list[str], dict[str, Any]]], wall_s: float) -> str:
    lines = ["# Simulator replay speed, every option, the Mooncake hour", "",
             f"Produced by `python -m bench.scripts.replay_speed` at commit {git_commit()} "
             f"({datetime.now(UTC):%Y-%m-%d}, {wall_s / 60:.1f} min) on {_machine()}, Python "
             f"{platform.python_version()}: one process, one replay at a time (one core). Workload: `python -m "
             f"bench {' '.join(HOUR)} <option>`. Replay = the event loop; the trace load is timed apart. "
             f"Target: <= {TARGET_S:g} s per replay.", "",
             "| option | overrides | requests | finished | replay (s) | trace load (s) | target |",
             "|---|---|---|---|---|---|---|"]
    for label, overrides, r in rows:
        if "error" in r:
            lines.append(f"| `{label}` | `{' '.join(overrides)}` | | | failed: {r['error']} | | NOT met |")
            continue
        lines.append(f"| `{label}` | `{' '.join(overrides) or '-'}` | {r['requests']:,} | {r['finished']:,} | "
                     f"{r['replay_s']:.1f} | {r['load_s']:.1f} | {'met' if r['replay_s'] <= TARGET_S else 'NOT met'} |")
    slow = [label for label, _, r in rows if "error" in r or r["replay_s"] > TARGET_S]
    lines += ["", "Not rows: " + "; ".join(f"`{k}`: {v}" for k, v in {**SKIPPED, **SKIPPED_GROUPS}.items()) + ".",
              "", "Verdict: " + (f"every replay within {TARGET_S:g} s." if not slow else
                                 "over the target or failed: " + ", ".join(f"`{s}`" for s in slow) + ".")]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_output_args(ap, "replay_speed", "replay_speed")
    ap.add_argument("--only", nargs="*", choices=GROUPS, help="groups to run (default: every one)")
    args = ap.parse_args()
    git_commit()  # NOTE: stamps the run now (cached), before any work
    t0 = time.perf_counter()
    rows = []
    for label, overrides in options():
        group = label.split("/", 1)[0]
        if args.only and group not in args.only and overrides:
            continue
        try:
            r = replay(overrides, args.results / label.replace("/", "_").replace(" ", "_"))
        except Exception as e:  # NOTE: one option's failure is a row, not the end of the table
            r = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"}
        rows.append((label, overrides, r))
        print(f"{label}: " + (r["error"] if "error" in r else f"{r['replay_s']:.1f} s"), flush=True)
    args.out.write_text(render(rows, time.perf_counter() - t0))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
