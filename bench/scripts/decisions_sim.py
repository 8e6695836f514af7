"""Flide in the simulator: shared-context decision calls against SGLang's built-in routes.

    python -m bench.scripts.decisions_sim                                   # prints the table
    python -m bench.scripts.decisions_sim --out bench/results/decisions_sim.md   # and writes it

Workload: decision calls (one shared context of ``C`` tokens, ``N`` questions of
``q_i`` tokens, each answered at its last token; prefill only) arriving as a
Poisson process, sizes from the stated ``DecisionMix`` (``bench/sim/decisions.py``):
``N`` log-uniform in [4, 64], ``C`` log-uniform in [1024, 8192], ``q_i = 8 + G`` with
``G`` geometric of mean 16 (``q_i`` ~24 on average), clipped to [8, 64]. The CPU
profile draws ``C`` in [256, 2048] instead: SmolLM2-135M's context is 8192 tokens
and one 2048-token prefill takes ~5.7 s on the CPU server.

One simulated server runs one prefill pass at a time (``simulate_decisions``),
each pass at most ``sim.max_prefill_tokens`` (16384, SGLang's default) tokens,
timed by the profile's cost model. Rows:

* ``separate fcfs``: SGLang's ``/v1/decisions`` (one ``context + question`` prompt
  per question), its default order: prompts of one call in the same pass each
  compute the context, unless an earlier pass cached it;
* ``separate lpm``: the same with ``--schedule-policy lpm``: cached contexts
  first, then one prompt per uncached context; SGLang 0.5.23's in-batch prefix
  caching only deprioritises the other prompts sharing a prefix, so while the
  budget lasts they join the same pass and compute the context again;
* ``multi-item``: SGLang's ``/v1/score`` multi-item scoring (``--enable-mis``), a
  cost model of it: the context and every question plus a delimiter in one
  sequence, radix cache off;
* ``flide``: the context and all questions in ONE packed sequence (each question
  attends to the context and itself), several calls per pass.

Two model settings share the profile's cost: an attention model (a computed
context stays cached: ``holds_context``) and a hybrid (recurrent) model whose
context state is not cached mid-prompt (no pass finds it cached; multi-item
never does).

Columns: questions/s at the highest Poisson rate whose p99 call latency over
``CALLS`` calls is within the profile's objective (bisection over the rate,
``max_rate_within_slo``; 0: no rate meets it, a lone call already misses it);
that rate's ratio to the best built-in (the best of separate fcfs, separate lpm
and multi-item); p50/p99 call latency and tokens computed per question at a
common moderate rate, half the best built-in's rate (half Flide's when no
built-in meets the objective).

Nothing is tuned here (Flide has no parameters, the built-ins run as SGLang
ships them); the two seeds (``SEEDS``) are two independent draws of the same
mix, reported side by side. Policies are built from the classes
``conf/decisions/*.yaml`` name (``+decisions=`` needs the kind's registry entry).
Caveats: the KV pool is not modelled (prefill only); the hybrid setting keeps
the attention profile's pass costs (only the caching differs); the separate
twins stop a pass at the first prompt that does not fit, where SGLang would
chunk it (the same tokens, a later finish for that prompt).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.config import compose_bench, resolve_bench
from bench.frontier import Metric, verdict_lines
from bench.scripts.common import git_commit
from bench.scripts.splits import TIE
from bench.sim.cost import CostModel
from bench.sim.decisions import (
    DecisionMix,
    DecisionSummary,
    Layout,
    RateResult,
    decision_calls,
    max_rate_within_slo,
    simulate_decisions,
    summarize,
)
from policies.decisions import DecisionsPolicy
from policies.decisions.flide import FlidePolicy
from policies.decisions.separate import SeparatePolicy

#: Calls per replay (each rate probe, and the moderate-rate replay).
CALLS = 400
#: The two independent draws of each profile's mix.
SEEDS = (0, 1)


@dataclass(frozen=True)
class Profile:
    """One simulated deployment: its bench overrides, the objective, the call mix."""

    name: str
    overrides: tuple[str, ...]
    slo_s: float
    """The p99 call-latency objective (seconds)."""
    mix: DecisionMix


PROFILES = (
    Profile("H100, Llama-3.1-8B", ("accelerator=h100", "model_profile=llama-3.1-8b"), 2.0, DecisionMix()),
    Profile("CPU server, SmolLM2-135M", ("accelerator=cpu", "model_profile=smollm2-135m"), 30.0,
            DecisionMix(context=(256, 2048))),
)

#: (row, policy, layout); the first three are SGLang's built-ins.
ROWS: tuple[tuple[str, DecisionsPolicy, Layout], ...] = (
    ("separate fcfs", SeparatePolicy(), "native"),
    ("separate lpm", SeparatePolicy(in_batch_prefix_caching=True), "native"),
    ("multi-item (MIS)", FlidePolicy(), "multi_item"),
    ("flide", FlidePolicy(), "native"),
)
BUILT_INS = ("separate fcfs", "separate lpm", "multi-item (MIS)")
#: (setting, holds_context)
MODELS = (("attention", True), ("hybrid", False))


@dataclass(frozen=True)
class Row:
    """One row's numbers."""

    rate: RateResult
    moderate_rate: float
    """The setting's common moderate rate (calls/s)."""
    moderate: DecisionSummary


def setting_rows(profile: Profile, cost: CostModel, budget: int, holds: bool, seed: int) -> dict[str, Row]:
    """Every row for one model setting and seed: the rate search, then the common moderate rate."""
    rates = {name: max_rate_within_slo(policy, cost, budget, profile.slo_s, holds_context=holds, layout=layout,
                                       mix=profile.mix, seed=seed, count=CALLS)
             for name, policy, layout in ROWS}
    best = max(rates[n].rate_per_s for n in BUILT_INS) or rates["flide"].rate_per_s
    calls = decision_calls(best / 2, CALLS, seed, profile.mix)
    return {name: Row(rates[name], best / 2, summarize(simulate_decisions(policy, calls, cost, budget, holds, layout),
                                                       profile.slo_s))
            for name, policy, layout in ROWS}


def table(profile: Profile, seed: int, rows: dict[str, dict[str, Row]]) -> list[str]:
    """The markdown table of one profile and seed (``rows``: by model setting, then row)."""
    out = [f"\n## {profile.name}; seed {seed}; p99 objective {profile.slo_s:g} s\n",
           "| model | row | questions/s within objective (calls/s) | vs best built-in | moderate rate (calls/s) "
           "| p50 / p99 at it (s) | tokens / question |",
           "|---|---|---:|---:|---:|---:|---:|"]
    for setting, by_row in rows.items():
        best = max(by_row[n].rate.rate_per_s for n in BUILT_INS)
        for name, row in by_row.items():
            s, r = row.rate.summary, row.rate.rate_per_s
            served = f"{s.questions_per_s:.1f} ({r:.3g})" if s is not None else "0 (none)"
            ratio = f"{r / best:.2f}x" if best > 0 else "n/a"
            m = row.moderate
            out.append(f"| {setting} | {name} | {served} | {ratio} | {row.moderate_rate:.3g} "
                       f"| {_seconds(m.p50_s)} / {_seconds(m.p99_s)} | {m.tokens_per_question:.0f} |")
    return out


#: The metric pair of issue 28: questions/s within the p99 objective, and p99 call latency at the
#: common moderate rate (values within ``TIE`` count as equal).
FRONTIER_METRICS = (Metric("questions_per_s", "questions/s within objective", higher_is_better=True, tolerance=TIE),
                    Metric("p99_s", "p99 at the moderate rate", tolerance=TIE))


def frontier_point(by_row: dict[str, Row]) -> dict[str, tuple[float, float]]:
    """Each row of one setting as a point of ``FRONTIER_METRICS``."""
    return {name: (row.rate.summary.questions_per_s if row.rate.summary is not None else 0.0, row.moderate.p99_s)
            for name, row in by_row.items()}


def frontier_section(points: dict[str, dict[str, tuple[float, float]]]) -> list[str]:
    """Flide's verdict against the three built-in routes on both metrics, per profile, setting and seed."""
    return ["\n## Frontier verdict: Flide against SGLang's routes\n",
            "Per profile, model setting and seed, both metrics at once (`bench/frontier.py`; values within "
            f"{TIE:.0%} count as equal): " + " and ".join(m.name for m in FRONTIER_METRICS) + ".\n",
            *verdict_lines(points, "flide", BUILT_INS, FRONTIER_METRICS)]


def _seconds(x: float) -> str:
    """Three significant digits, whole seconds from 1000 s on (no exponents)."""
    return f"{x:.3g}" if x < 1000 else f"{x:.0f}"


def main() -> None:
    """Build the table, print it, and write it with ``--out``."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="write the table here (default: print only)")
    args = parser.parse_args()
    commit = git_commit()
    t0 = time.monotonic()
    command = " ".join(["python -m bench.scripts.decisions_sim", *sys.argv[1:]])
    out = [f"# Flide: shared-context decisions in the simulator\n\nBuilt by `{command}` at commit {commit}, "
           f"{datetime.now(UTC):%Y-%m-%d}. Method: the script's docstring. Seeds {', '.join(map(str, SEEDS))}; "
           f"{CALLS} calls per replay; nothing tuned.\n"]
    points: dict[str, dict[str, tuple[float, float]]] = {}
    for profile in PROFILES:
        settings = resolve_bench(compose_bench(list(profile.overrides)))
        cost = CostModel(settings.accelerator, settings.model_profile)
        budget = settings.sim.max_prefill_tokens
        for seed in SEEDS:
            rows = {setting: setting_rows(profile, cost, budget, holds, seed) for setting, holds in MODELS}
            out += table(profile, seed, rows)
            points |= {f"{profile.name}, {setting}, seed {seed}": frontier_point(by_row)
                       for setting, by_row in rows.items()}
    out += frontier_section(points)
    out.append(f"\nWall time {time.monotonic() - t0:.0f} s.\n")
    text = "\n".join(out)
    print(text)
    if args.out is not None:
        args.out.write_text(text)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
