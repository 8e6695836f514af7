"""Penelope vs tail-first eviction on Claude Code agent sessions -> ``bench/results/penelope.md``.

    python -m bench.scripts.penelope        # every row, then the table (a few minutes)

Claude Code agent sessions (kv-cache-tester, closed-loop with the recorded
think times; ``SESSIONS`` sessions starting at ``SESSION_RATE``/s) on one H100
with Llama-3.1-8B, at several KV pool sizes (``sim.max_total_tokens``), with
``+cache=lru`` (stock SGLang, tail-first), ``lfu``, ``penelope`` (strict
order: shared prefix last, private histories LRU across sessions, front-first
within) and ``penelope`` with ``position_weight_s`` > 0 (fronts of recent
histories may go before an older history's tail), each without and with a
host-memory tier of ``HOST_TIER_TOKENS``. One simulation at a time.

Recomputed tokens = prompt tokens the cache had held once but not at
admission, prefilled again (``meta.evicted_recomputed_tokens``, the same
measure for every policy); the gap share is what Penelope recomputed inside a
path (``meta.gap_recomputed_tokens``).
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.config import compose_bench, resolve_bench
from bench.report import fmt
from bench.run import run_bench
from bench.scripts.baselines import COMMON
from bench.scripts.common import add_output_args, git_commit

SESSION_RATE = 0.005
SESSIONS = 120
CAPACITIES = (300_000, 450_000, 600_000, 750_000, 1_200_000)
#: Session-start seeds (``trace.seed``) of the spread section, at SPREAD_CAPACITIES.
SPREAD_SEEDS = (0, 1, 2, 3, 4)
SPREAD_CAPACITIES = (450_000, 600_000, 750_000)
HOST_TIER_TOKENS = 2_000_000
POSITION_WEIGHT_S = 0.001
#: (row label, overrides choosing the cache policy)
POLICIES = (
    ("lru", ("+cache=lru",)),
    ("lfu", ("+cache=lfu",)),
    ("penelope", ("+cache=penelope",)),
    (f"penelope w={POSITION_WEIGHT_S}", ("+cache=penelope", f"cache.position_weight_s={POSITION_WEIGHT_S}")),
)
TARGET = 0.40
"""Penelope's mean TTFT at least this far below lru's where lru thrashes."""


def overrides(capacity: int, policy: tuple[str, ...], host: bool, seed: int = 0) -> list[str]:
    out = ["trace=claude_code_sessions", f"trace.claude_code.session_rate={SESSION_RATE}",
           f"trace.claude_code.max_sessions={SESSIONS}", *COMMON, f"sim.max_total_tokens={capacity}",
           *policy, *([f"trace.seed={seed}"] if seed else [])]
    return out + ([f"++cache.host_tier_tokens={HOST_TIER_TOKENS}"] if host else [])


def run_one(capacity: int, label: str, policy: tuple[str, ...], host: bool, results: Path,
            seed: int = 0) -> dict:
    ov = overrides(capacity, policy, host, seed)
    settings = resolve_bench(compose_bench([*ov, "output.progress=false", "output.plots=false"]))
    tag = f"{capacity}_{label.replace(' ', '_')}{'_host' if host else ''}{f'_seed{seed}' if seed else ''}"
    out = run_bench(settings, results / tag)
    s, m = out["summary"], out["meta"]
    return {"mean": s["ttft_s"]["mean"], "p50": s["ttft_s"]["p50"], "p99": s["ttft_s"]["p99"],
            "finished": s["finished"], "requests": s["requests"], "aborted": s["aborted"],
            "context": settings.model_profile.context_length, "hit": s["prefix_hit_rate"],
            "prefill": s["prefill_tokens"], "recomputed": m["evicted_recomputed_tokens"],
            "gap": m["gap_recomputed_tokens"], "restored": m["restored_tokens"],
            "wall_s": m["replay_wall_s"], "cmd": "python -m bench " + " ".join(ov)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_output_args(ap, "penelope", "penelope")
    args = ap.parse_args()
    git_commit()  # NOTE: stamps the run now (cached), before any work
    t0 = time.perf_counter()
    table: dict[tuple[int, bool], dict[str, dict]] = {}
    for host in (False, True):
        for capacity in CAPACITIES:
            row = table.setdefault((capacity, host), {})
            for label, policy in POLICIES:
                row[label] = r = run_one(capacity, label, policy, host, args.results)
                print(f"{capacity} {label}{' +host' if host else ''}: TTFT mean {r['mean']:.2f} "
                      f"p50 {r['p50']:.2f} p99 {r['p99']:.2f} recomputed {r['recomputed']} "
                      f"({r['wall_s']:.0f} s)", flush=True)
    spread: dict[tuple[int, str], dict[int, float]] = {}
    for capacity in SPREAD_CAPACITIES:
        for label, policy in POLICIES:
            if label == "lfu":
                continue
            for seed in SPREAD_SEEDS:
                r = table[(capacity, False)][label] if seed == 0 else \
                    run_one(capacity, label, policy, False, args.results, seed)
                spread.setdefault((capacity, label), {})[seed] = r["mean"]
                print(f"{capacity} {label} seed {seed}: TTFT mean {r['mean']:.2f}", flush=True)
    args.out.write_text(render(table, spread, time.perf_counter() - t0))
    print(f"wrote {args.out}")


def render(table: dict, spread: dict, wall_s: float) -> str:
    labels = [label for label, _ in POLICIES]
    lines = ["# Penelope vs tail-first eviction (simulator)", "",
             f"Produced by `python -m bench.scripts.penelope` at commit {git_commit()} "
             f"({datetime.now(UTC):%Y-%m-%d}, {wall_s / 60:.0f} min). One H100 with "
             "Llama-3.1-8B (roofline cost model: compare rows, not absolute numbers); "
             f"Claude Code agent sessions, {SESSIONS} sessions starting at {SESSION_RATE}/s, "
             "closed-loop with recorded think times. Host tier (rows `+host`): "
             f"{HOST_TIER_TOKENS:,} tokens of host memory restored at 50 GB/s.", "",
             "Recomputed = prompt tokens the cache had held once but not at admission, "
             "prefilled again (same measure for every policy); gap = the part Penelope "
             "recomputed inside a path (prefix and tail kept); restored = tokens copied back "
             "from the host tier.", "",
             *_excluded(table), "",
             "| KV pool (tokens) | host tier | policy | TTFT mean | p50 | p99 | vs lru mean | "
             "hit rate | recomputed | gap | restored | finished |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (capacity, host), row in table.items():
        base = row["lru"]["mean"]
        for label in labels:
            r = row[label]
            change = (r["mean"] - base) / base if base else float("nan")
            lines.append(
                f"| {capacity:,} | {'yes' if host else 'no'} | `{label}` | {fmt(r['mean'], 1, 's')} | "
                f"{fmt(r['p50'], 1, 's')} | {fmt(r['p99'], 1, 's')} | {change:+.0%} | "
                f"{fmt(r['hit'], 100, '%')} | {r['recomputed']:,} | {r['gap']:,} | {r['restored']:,} | "
                f"{r['finished']}/{r['requests']} |")
    worst = max((c for c, h in table if not h), key=lambda c: table[(c, False)]["lru"]["mean"])
    row = table[(worst, False)]
    lines += ["", "## Target", "",
              f"Penelope mean TTFT >= {TARGET:.0%} below lru at the pool where lru thrashes "
              f"(the pool with lru's highest mean TTFT, {worst:,} tokens, no host tier):", ""]
    for label in labels[2:]:
        cut = 1 - row[label]["mean"] / row["lru"]["mean"]
        lines.append(f"- `{label}`: {cut:.0%} below lru -> {'met' if cut >= TARGET else 'NOT met'}")
    lines += render_spread(spread)
    lines += ["", "## Commands", "", "```"]
    for row in table.values():
        lines += [row[label]["cmd"] for label in labels]
    lines.append("# spread rows: the same lines (no host tier) with trace.seed=1..4 added")
    lines += ["```", ""]
    return "\n".join(lines)


def _excluded(table: dict) -> list[str]:
    """What every row leaves out: requests longer than the profile's context (aborted)."""
    rows = [r for row in table.values() for r in row.values()]
    aborted = {(r["aborted"], r["requests"], r["context"]) for r in rows}
    if len(aborted) != 1:
        return ["Excluded: the rows abort different numbers of requests "
                f"({sorted(aborted)}); compare them with care."]
    n, total, context = aborted.pop()
    if not n:
        return ["Excluded: nothing; every request fits the profile's context."]
    return [f"Excluded: {n:,} of {total:,} requests ({n / total:.0%}) have prompts that the model "
            f"profile's {context:,}-token context (or the KV pool) cannot hold: agent sessions outgrow "
            "it. They are aborted at arrival, the same ones in every row; TTFT and hit rates are over "
            f"the {total - n:,} served requests."]


def render_spread(spread: dict) -> list[str]:
    """Per-seed change of mean TTFT vs lru (same seed), and the pooled change
    (sum of the seeds' means vs lru's sum): the run-to-run spread the single
    table above hides."""
    labels = [label for label, _ in POLICIES if label not in ("lru", "lfu")]
    seeds = ", ".join(str(s) for s in SPREAD_SEEDS)
    lines = ["", "## Spread over session-start seeds", "",
             f"The same runs (no host tier) with `trace.seed` {seeds} (Poisson session "
             "starts): lru's mean TTFT per seed, then each policy's change vs lru on the "
             "same seed, and pooled over the seeds (sum of means vs lru's sum).", "",
             "| KV pool (tokens) | policy | " + " | ".join(f"seed {s}" for s in SPREAD_SEEDS)
             + " | pooled |",
             "|---|---|" + "---|" * (len(SPREAD_SEEDS) + 1)]
    for capacity in SPREAD_CAPACITIES:
        lru = spread[(capacity, "lru")]
        lines.append(f"| {capacity:,} | `lru` (mean TTFT) | "
                     + " | ".join(fmt(lru[s], 1, "s") for s in SPREAD_SEEDS) + " | |")
        for label in labels:
            r = spread[(capacity, label)]
            pooled = sum(r.values()) / sum(lru.values()) - 1
            lines.append(f"| {capacity:,} | `{label}` | "
                         + " | ".join(f"{r[s] / lru[s] - 1:+.0%}" for s in SPREAD_SEEDS)
                         + f" | {pooled:+.0%} |")
    return lines


if __name__ == "__main__":
    main()
