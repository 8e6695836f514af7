"""Baseline scheduling policies on real traces -> ``bench/results/baselines.md``.

    python -m bench.scripts.baselines                 # all rows, writes the table
    python -m bench.scripts.baselines --out /tmp/b.md # elsewhere

Every row is one ``python -m bench`` run (the command is printed in the table)
on one H100 with Llama-3.1-8B, each trace time-scaled to a load where queues
form. The full results folder of every run goes under
``results/baselines/<date>/`` (git-ignored); only the table is meant to be
committed.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from typing import Any

from bench.config import compose_bench, resolve_bench
from bench.report import fmt
from bench.run import run_bench
from bench.scripts.common import add_output_args, git_commit
from compose.progress import Progress

#: (trace option, time scale): Mooncake at 1x overloads one H100 ~3x; Azure
#: conversation at 1x leaves it mostly idle.
TRACES = (("mooncake_conversation", 3.0), ("azure_conversation", 0.4))
#: ``None`` = no ``+policy`` (SGLang's built-in order), then the pure policies.
POLICIES = (None, "fcfs", "lpm", "dfs-weight", "hrrn", "lof", "shortest-prefill-first", "shortest_prefill")
COMMON = ("accelerator=h100", "model_profile=llama-3.1-8b")

COLUMNS = ("policy", "finished", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "E2E p50",
           "goodput", "hit rate", "queue (mean)", "retractions")

#: One row: the policy (``None``: built-in), its run's summary, the run's overrides.
Row = tuple[str | None, dict[str, Any], list[str]]
#: One trace's table: the trace, its time scale, the last run's meta, the rows.
Section = tuple[str, float, dict[str, Any], list[Row]]


def overrides_for(trace: str, scale: float, policy: str | None) -> list[str]:
    out = [f"trace={trace}", f"trace.time_scale={scale}", *COMMON]
    return out + ([f"+policy={policy}"] if policy else [])


def row(policy: str | None, s: dict[str, Any]) -> list[str]:
    return [
        f"`{policy}`" if policy else "built-in (fcfs)", f"{s['finished']}/{s['requests']}",
        fmt(s["ttft_s"]["p50"], 1, "s"), fmt(s["ttft_s"]["p99"], 1, "s"),
        fmt(s["tpot_s"]["p50"], 1e3, "ms"), fmt(s["tpot_s"]["p99"], 1e3, "ms"),
        fmt(s["e2e_s"]["p50"], 1, "s"), fmt(s["goodput_rps"], 1, "req/s"),
        fmt(s["prefix_hit_rate"], 100, "%"), fmt(s.get("queue_len", {}).get("mean")),
        str(s["retractions"]),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_output_args(parser, "baselines", "baselines")
    args = parser.parse_args()
    git_commit()  # NOTE: stamps the run now (cached), before any work

    sections: list[Section] = []
    # NOTE: one bar over the whole sweep (each run's own replay bar is off); the per-run
    # lines are printed as before, above the bar on a terminal.
    with Progress(len(TRACES) * len(POLICIES), "baselines", unit="run") as bar:
        for trace, scale in TRACES:
            rows: list[Row] = []
            meta: dict[str, Any] | None = None
            for policy in POLICIES:
                bar.status(f"{trace} {policy or 'builtin'}")
                overrides = overrides_for(trace, scale, policy)
                settings = resolve_bench(compose_bench([*overrides, "output.progress=false"]))
                t0 = time.perf_counter()
                result = run_bench(settings, args.results / trace / (policy or "builtin"))
                bar.write(f"{trace} {policy or 'builtin'}: {time.perf_counter() - t0:.1f} s", file=sys.stdout)
                bar.update()
                rows.append((policy, result["summary"], overrides))
                meta = result["meta"]
            assert meta is not None  # NOTE: POLICIES is not empty: every trace ran
            sections.append((trace, scale, meta, rows))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(sections))
    print(f"wrote {args.out}")


def render(sections: list[Section]) -> str:
    first = sections[0][3][0][1]
    lines = [
        "# Baseline scheduling policies (simulated)",
        "",
        f"Produced by `python -m bench.scripts.baselines` at commit {git_commit()} "
        f"({datetime.now(UTC):%Y-%m-%d}). One H100 (80 GB) with Llama-3.1-8B "
        "(`conf/accelerator/h100.yaml`, `conf/model_profile/llama-3.1-8b.yaml`: a roofline "
        "cost model with uncalibrated efficiencies, so compare rows, not absolute numbers). "
        "Eviction: SGLang's LRU; no admission policy. "
        f"Goodput counts requests with TTFT <= {first['slo']['ttft_s']} s and TPOT <= "
        f"{first['slo']['tpot_s']} s. `built-in` keeps SGLang's own queue order (what the "
        "server runs without `+policy`); the other rows run the pure policy objects. Native "
        "`lpm` and `hrrn` keep the queue order while more than 128 wait, as SGLang does. Not "
        "modeled: native `shortest-prefill-first`'s cap on a running chunked prefill and its "
        "one-chunked-request rule; native `hrrn`'s token clock, which in SGLang 0.5.23 also "
        "advances on decode steps (the simulator counts prefill tokens only). `lof` orders by "
        "`max_new_tokens`, which in the simulator is the true output length (an oracle; live it "
        "is the client's cap).",
        "",
    ]
    for trace, scale, meta, rows in sections:
        same = _identical_rows(rows)
        lines += [f"## {trace} (time scale {scale})", "",
                  f"{meta['trace_source'].split('/data/')[-1]}, arrival times x{scale}. "
                  f"KV pool {meta['sim']['capacity']:,} tokens, chunked prefill "
                  f"{meta['sim']['chunked_prefill_size']}, {meta['sim']['max_running_requests']} "
                  "request slots.", "",
                  "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(row(policy, s)) + " |" for policy, s, _ in rows]
        if same:
            lines += ["", "Identical rows come from identical schedules: " + "; ".join(same) + "."]
        lines += ["", "Commands (one per row, from the repository root):", "", "```"]
        lines += [f"python -m bench {' '.join(o)}" for _, _, o in rows]
        lines += ["```", ""]
    return "\n".join(lines)


def _identical_rows(rows: list[Row]) -> list[str]:
    """Groups of policies whose summaries are equal (worth a word in the table)."""
    groups: dict[str, list[str]] = {}
    for policy, summary, _ in rows:
        groups.setdefault(repr(summary), []).append(f"`{policy}`" if policy else "built-in")
    return [" = ".join(g) for g in groups.values() if len(g) > 1]


if __name__ == "__main__":
    main()
