"""Penelope vs tail-first eviction on Claude Code agent sessions -> ``bench/results/penelope.md``.

    python -m bench.scripts.penelope        # every row, then the table (~30 min on 2 cores)
    python -m bench.scripts.penelope --jobs 1   # one simulation at a time
    python -m bench.scripts.penelope --check-defaults  # also fail unless conf/cache/penelope.yaml
                                                     # holds the position_weight_s the sweep chose

Claude Code agent sessions (kv-cache-tester, closed-loop with the recorded
think times; ``SESSIONS`` sessions starting at ``SESSION_RATE``/s: the tuning
instance, seed 0, from the tuning half of the sessions, the evaluation seeds
from the evaluation half, ``trace.claude_code.split``) on one H100
with Llama-3.1-8B, at several KV pool sizes (``sim.max_total_tokens``), with
``+cache=lru`` (stock SGLang, tail-first), ``lfu``, ``penelope`` (strict
order: shared prefix last, private histories LRU across sessions, front-first
within) and ``penelope`` with ``position_weight_s`` > 0 (fronts of recent
histories may go before an older history's tail), each without and with a
host-memory tier of ``HOST_TIER_TOKENS``. Control rows: every built-in under
the flag Penelope forces (no overlap scheduler, ``sim.disable_overlap_schedule``,
charged the same way), so the verdict also says what Penelope's order adds
beyond the flag.

Recomputed tokens = prompt tokens the cache had held once but not at
admission, prefilled again (``meta.evicted_recomputed_tokens``, the same
measure for every policy); the gap share is what Penelope recomputed inside a
path (``meta.gap_recomputed_tokens``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.config import compose_bench, resolve_bench
from bench.frontier import Metric, verdict_lines
from bench.report import fmt
from bench.run import run_bench
from bench.scripts.baselines import COMMON
from bench.scripts.common import default_check, geomean, git_commit, option_default, sweep_main
from bench.scripts.splits import TIE, session_split

SESSION_RATE = 0.005
SESSIONS = 120
CAPACITIES = (300_000, 450_000, 600_000, 750_000, 1_200_000)
#: Session-start seeds (``trace.seed``) of the evaluation split; seed 0 is the tuning instance.
EVAL_SEEDS = (1, 2, 3, 4)
HOST_TIER_TOKENS = 2_000_000
#: ``cache.position_weight_s`` values tried on the tuning instance, in the rule's order of preference.
WEIGHT_SWEEP = (0.0, 0.0005, 0.001, 0.002, 0.004)
#: SGLang's built-in eviction orders (``--radix-eviction-policy``; ``tlru`` is
#: left out: with its default thresholds it is ``lru``, and its thresholds need
#: a TTFT budget this table does not set).
BUILTINS = ("lru", "lfu", "fifo", "mru", "filo", "priority", "slru")
PENELOPE = "penelope"


def weight_label(weight: float) -> str:
    """The row label of Penelope at ``position_weight_s=weight`` (the sweep's rows)."""
    return f"penelope w={weight:g}"


STRICT = weight_label(0.0)
#: Control rows: a built-in under the flags Penelope forces (``+cache=penelope``: no overlap scheduler).
CONTROL = "{} no-overlap"
CONTROLS = tuple((CONTROL.format(name), (f"+cache={name}", "sim.disable_overlap_schedule=true"))
                 for name in BUILTINS)
CONTROL_ROWS = tuple(label for label, _ in CONTROLS)
#: (row label, overrides choosing the cache policy)
POLICIES = (
    *((name, (f"+cache={name}",)) for name in BUILTINS),
    (PENELOPE, ("+cache=penelope",)),
    *((weight_label(w), ("+cache=penelope", f"cache.position_weight_s={w}")) for w in WEIGHT_SWEEP),
    *CONTROLS,
)
SWEEP_ROWS = tuple(weight_label(w) for w in WEIGHT_SWEEP)
#: Rows of the tuning instance: the orders, the controls and the sweep (``penelope`` as
#: configured is one of the sweep's rows there).
TUNING_ROWS = (*BUILTINS, *SWEEP_ROWS, *CONTROL_ROWS)
#: Rows that also run with the host tier (tuning instance only).
HOST_POLICIES = ("lru", "lfu", *SWEEP_ROWS)
TARGET = 0.40
"""Penelope's mean TTFT at least this far below lru's where lru thrashes."""


def overrides(capacity: int, policy: tuple[str, ...], host: bool, seed: int = 0) -> list[str]:
    out = ["trace=claude_code_sessions", f"trace.claude_code.session_rate={SESSION_RATE}",
           f"trace.claude_code.max_sessions={SESSIONS}", f"trace.claude_code.split={session_split(seed)}", *COMMON,
           f"sim.max_total_tokens={capacity}", *policy, *([f"trace.seed={seed}"] if seed else [])]
    if not host:
        return out
    # NOTE: the same tier, by its implementation: Switchboard's (in the gap cache) for Penelope,
    # SGLang's own (HiCache, sim.hicache_tokens) for a tail-first order (compose/compat.py)
    gaps = any(o == "+cache=penelope" for o in policy)
    return [*out, f"++cache.host_tier_tokens={HOST_TIER_TOKENS}" if gaps else f"sim.hicache_tokens={HOST_TIER_TOKENS}"]


def run_one(capacity: int, label: str, policy: tuple[str, ...], host: bool, results: Path,
            seed: int = 0) -> dict[str, Any]:
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


Key = tuple[int, bool, int, str]
"""(capacity, host tier, seed, policy label)."""


def configured_weight() -> float:
    """``position_weight_s`` as ``conf/cache/penelope.yaml`` holds it."""
    return float(option_default("cache", "penelope", "position_weight_s"))


def eval_rows() -> tuple[str, ...]:
    """Penelope's rows on the evaluation seeds: as configured, and the strict order beside it
    when the configured weight is not 0."""
    return (PENELOPE,) if configured_weight() == 0 else (PENELOPE, STRICT)


def jobs() -> list[Key]:
    """Every row: the tuning seed's full table with the sweep, then the evaluation seeds (no host tier)."""
    out = [(c, False, 0, label) for c in CAPACITIES for label in TUNING_ROWS]
    out += [(c, True, 0, label) for c in CAPACITIES for label in HOST_POLICIES]
    evaluated = (*BUILTINS, *eval_rows(), *CONTROL_ROWS)
    out += [(c, False, seed, label) for seed in EVAL_SEEDS for c in CAPACITIES for label in evaluated]
    return out


def weight_scores(rows: dict[Key, dict[str, Any]]) -> dict[float, float]:
    """Per swept weight: the geometric mean of mean TTFT over the tuning instance's cells
    (every pool, without and with the host tier)."""
    cells = [(c, host) for host in (False, True) for c in CAPACITIES]
    return {w: geomean(rows[(c, host, 0, weight_label(w))]["mean"] for c, host in cells) for w in WEIGHT_SWEEP}


def choose_weight(scores: dict[float, float]) -> float:
    """The rule: the first weight in sweep order whose score is within ``TIE`` of the lowest."""
    # NOTE: ties go to the earlier value (the strict order first), so noise cannot move the default
    best = min(scores.values())
    return next(w for w in WEIGHT_SWEEP if scores[w] <= best * (1 + TIE))


def stale_default(rows: dict[Key, dict[str, Any]]) -> str | None:
    """A message when the config's ``position_weight_s`` is not the sweep's choice."""
    return default_check("cache", "penelope", "position_weight_s", choose_weight(weight_scores(rows)))


def describe(key: Key) -> str:
    """A row's name in the log: ``<capacity> <policy>[ +host] seed <seed>``."""
    capacity, host, seed, label = key
    return f"{capacity} {label}{' +host' if host else ''} seed {seed}"


def _run(key: Key, results: Path) -> dict[str, Any]:
    capacity, host, seed, label = key
    return run_one(capacity, label, dict(POLICIES)[label], host, results, seed)


def main() -> None:
    sweep_main("penelope", __doc__, jobs, _run, describe,
               lambda r: f"TTFT mean {r['mean']:.2f} p50 {r['p50']:.2f} p99 {r['p99']:.2f} "
                         f"recomputed {r['recomputed']} ({r['wall_s']:.0f} s)",
               render, stale_default)


def tuning_line(capacity: int, host: bool, label: str, r: dict[str, Any], lru_mean: float) -> str:
    """One row of the tuning instance's table: run ``r``; ``lru_mean``: lru's mean TTFT beside it."""
    change = (r["mean"] - lru_mean) / lru_mean if lru_mean else float("nan")
    return (f"| {capacity:,} | {'yes' if host else 'no'} | `{label}` | {fmt(r['mean'], 1, 's')} | "
            f"{fmt(r['p50'], 1, 's')} | {fmt(r['p99'], 1, 's')} | {change:+.0%} | "
            f"{fmt(r['hit'], 100, '%')} | {r['recomputed']:,} | {r['gap']:,} | {r['restored']:,} | "
            f"{r['finished']}/{r['requests']} |")


def render(rows: dict[Key, dict[str, Any]], wall_s: float) -> str:
    lines = ["# Penelope vs SGLang's eviction orders (simulator)", "",
             f"Produced by `python -m bench.scripts.penelope` at commit {git_commit()} "
             f"({datetime.now(UTC):%Y-%m-%d}, {wall_s / 60:.0f} min). One H100 with "
             "Llama-3.1-8B (roofline cost model: compare rows, not absolute numbers); "
             f"Claude Code agent sessions, {SESSIONS} sessions starting at {SESSION_RATE}/s (seed 0: the "
             "tuning half of the sessions; evaluation seeds: the other half, `trace.claude_code.split`), "
             "closed-loop with recorded think times. Host tier (rows `+host`): "
             f"{HOST_TIER_TOKENS:,} tokens of host memory restored at 50 GB/s (Penelope's in its "
             "gap cache, `cache.host_tier_tokens`; for a built-in order SGLang's own HiCache, "
             "`sim.hicache_tokens`, modelled the same way). Built-ins: "
             + ", ".join(f"`{b}`" for b in BUILTINS) + " (SGLang's `--radix-eviction-policy` "
             "orders, run through the same seam; `priority` orders as `lru` here, no request having a "
             "priority, but without the waiting-prefix refresh SGLang runs for `lru` only; "
             "Penelope refreshes as `lru` does).", "",
             "Recomputed = prompt tokens the cache had held once but not at admission, "
             "prefilled again (same measure for every policy); gap = the part Penelope "
             "recomputed inside a path (prefix and tail kept); restored = tokens copied back "
             "from the host tier.", "",
             *_excluded(rows), ""]
    lines += render_verdict(rows)
    lines += ["", "## Frontier verdict: Penelope against every eviction order on mean TTFT and hit rate", "",
              "Per evaluation seed and pool, both metrics at once (`bench/frontier.py`; values within "
              f"{TIE:.0%} count as equal): against SGLang's orders as they run (with the overlap "
              "scheduler), then against the same orders under Penelope's flag (the controls).", ""]
    metrics = (Metric("mean", "TTFT mean", tolerance=TIE), Metric("hit", "hit rate", higher_is_better=True,
                                                                     tolerance=TIE))
    for among, what, noun in ((BUILTINS, "the built-ins", "built-in"), (CONTROL_ROWS, "the controls", "control")):
        lines += [f"`{PENELOPE}` against {what}:", ""]
        lines += verdict_lines({f"seed {s}, {c:,} tokens": {r: (rows[(c, False, s, r)]["mean"],
                                                               rows[(c, False, s, r)]["hit"])
                                                           for r in (*among, PENELOPE)}
                                for s in EVAL_SEEDS for c in CAPACITIES}, PENELOPE, among, metrics, noun)
        lines.append("")
    lines += ["", *render_sweep(rows)]
    lines += ["", "## Tuning instance (session-start seed 0)", "",
              "The sweep of `position_weight_s` ran on this seed (the tuning half of the sessions); "
              "it is reported, not judged.", "",
              "| KV pool (tokens) | host tier | policy | TTFT mean | p50 | p99 | vs lru mean | "
              "hit rate | recomputed | gap | restored | finished |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for host in (False, True):
        for capacity in CAPACITIES:
            base = rows[(capacity, host, 0, "lru")]["mean"]
            for label in (HOST_POLICIES if host else TUNING_ROWS):
                lines.append(tuning_line(capacity, host, label, rows[(capacity, host, 0, label)], base))
    lines += ["", "## Commands", "", "```"]
    lines += [r["cmd"] for (c, h, seed, _), r in rows.items() if seed == 0]
    lines.append(f"# evaluation rows: the lines without the host tier, with trace.seed="
                 f"{','.join(map(str, EVAL_SEEDS))} added")
    lines += ["```", ""]
    return "\n".join(lines)


def render_sweep(rows: dict[Key, dict[str, Any]]) -> list[str]:
    """The sweep of ``position_weight_s`` on the tuning instance and the rule's choice."""
    scores = weight_scores(rows)
    chosen, held = choose_weight(scores), configured_weight()
    lines = ["## `position_weight_s`, chosen on the tuning instance", "",
             "Seed 0 on the tuning half of the sessions, every pool without and with the host tier (10 "
             "cells). The rule (`choose_weight`): the lowest geometric mean of mean TTFT over the cells; "
             f"values within {TIE:.0%} of it count as equal and the first in sweep order wins (the sweep "
             "starts at the strict order, 0, written in the script).", "",
             "| position_weight_s | geometric-mean TTFT mean | vs strict (0) | lowest mean TTFT in |",
             "|---|---|---|---|"]
    cells = [(c, host) for host in (False, True) for c in CAPACITIES]
    for w in WEIGHT_SWEEP:
        wins = sum(min(WEIGHT_SWEEP, key=lambda v: rows[(c, h, 0, weight_label(v))]["mean"]) == w for c, h in cells)
        lines.append(f"| {w:g} | {scores[w]:.3f} s | {scores[w] / scores[0.0] - 1:+.1%} | "
                     f"{wins} of {len(cells)} cells |")
    verdict = "holds it" if chosen == held else f"holds {held:g}: STALE, change it by hand"
    lines += ["", f"Chosen: **{chosen:g}**; `conf/cache/penelope.yaml` {verdict}."]
    return lines


def _excluded(rows: dict[Key, dict[str, Any]]) -> list[str]:
    """What every row leaves out: requests longer than the profile's context (aborted)."""
    by_seed: dict[int, set[tuple[int, int, int]]] = {}
    for (_, _, seed, _), r in rows.items():
        by_seed.setdefault(seed, set()).add((r["aborted"], r["requests"], r["context"]))
    if any(len(v) != 1 for v in by_seed.values()):
        return ["Excluded: rows of one seed abort different numbers of requests; compare them with care."]
    parts = [(seed, *next(iter(v))) for seed, v in sorted(by_seed.items())]
    context = parts[0][3]
    share = ", ".join(f"seed {seed}: {n:,} of {total:,}" for seed, n, total, _ in parts)
    return [f"Excluded: requests whose prompts the model profile's {context:,}-token context (or the "
            f"KV pool) cannot hold ({share}): agent sessions outgrow it. They are aborted at arrival, "
            "the same ones in every row of a seed; TTFT and hit rates are over the served requests."]


def render_verdict(rows: dict[Key, dict[str, Any]]) -> list[str]:
    """Evaluation seeds: each Penelope row against the best built-in on the same
    seed and pool (lowest mean TTFT), and the 40% target where lru thrashes."""
    lines = ["## Verdict on the evaluation seeds " + ", ".join(map(str, EVAL_SEEDS)), "",
             "Per seed: the best built-in (lowest mean TTFT on that seed and pool) and Penelope's "
             "change against it; then the best control row (a built-in under the flag Penelope "
             "forces: no overlap scheduler, charged as Penelope is), which isolates what the order "
             "itself adds. Mean and range over the seeds. Negative = Penelope is faster.", "",
             "| KV pool (tokens) | policy | " + " | ".join(f"seed {s}" for s in EVAL_SEEDS)
             + " | mean | range | wins |", "|---|---|" + "---|" * (len(EVAL_SEEDS) + 3)]
    for capacity in CAPACITIES:
        for what, among in (("best built-in", BUILTINS), ("best control (no overlap)", CONTROL_ROWS)):
            best = {s: min(among, key=lambda b: rows[(capacity, False, s, b)]["mean"]) for s in EVAL_SEEDS}
            lines.append(f"| {capacity:,} | {what} (mean TTFT) | " + " | ".join(
                f"`{best[s]}` {fmt(rows[(capacity, False, s, best[s])]['mean'], 1, 's')}" for s in EVAL_SEEDS)
                + " | | | |")
            for label in eval_rows():
                ch = [rows[(capacity, False, s, label)]["mean"] / rows[(capacity, False, s, best[s])]["mean"] - 1
                      for s in EVAL_SEEDS]
                lines.append(f"| {capacity:,} | `{label}` vs {what.split(' (')[0]} | "
                             + " | ".join(f"{c:+.0%}" for c in ch)
                             + f" | {sum(ch) / len(ch):+.0%} | {min(ch):+.0%} to {max(ch):+.0%} "
                             f"| {sum(c < 0 for c in ch)}/{len(ch)} |")
    lines += ["", f"Target: Penelope's mean TTFT >= {TARGET:.0%} below lru's at the pool where lru "
              "thrashes (the pool with lru's highest mean TTFT on that seed, no host tier):", ""]
    for label in eval_rows():
        cells = []
        for s in EVAL_SEEDS:
            worst = max(CAPACITIES, key=lambda c: rows[(c, False, s, "lru")]["mean"])
            cut = 1 - rows[(worst, False, s, label)]["mean"] / rows[(worst, False, s, "lru")]["mean"]
            cells.append(f"seed {s} ({worst:,}): {cut:.0%} {'met' if cut >= TARGET else 'NOT met'}")
        lines.append(f"- `{label}`: " + "; ".join(cells))
    return lines


if __name__ == "__main__":
    main()
