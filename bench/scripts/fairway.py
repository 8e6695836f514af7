"""Fairway in the simulator: tuned on one split, judged on another -> ``bench/results/fairway.md``.

    python -m bench.scripts.fairway                   # sweep, evaluation, ablation (~15 min)
    python -m bench.scripts.fairway --check-defaults  # also fail unless conf/policy/fairway.yaml
                                                      # holds the setting the sweep chose

Protocol (docs/evaluation.md, scenarios in ``bench/scripts/splits.py``):

1. **Sweep, on the tuning split only.** One round of coordinate search over
   ``GRID`` from a fixed start (``SWEEP_START``, not the current defaults, so a
   rerun gives the same table). A setting is admissible when its TTFT p99 stays
   within 1.1x FCFS's in every tuning scenario; among admissible ones the lowest
   mean of ``p50 / FCFS p50`` wins. The script prints the chosen setting and
   never edits the config; the defaults in ``conf/policy/fairway.yaml`` are that
   setting (``--check-defaults`` verifies it).
2. **Evaluation split.** Every SGLang built-in order (``fcfs``, ``lpm``,
   ``dfs-weight``, ``hrrn``, ``lof``, ``shortest-prefill-first``), our
   ``shortest_prefill`` and ``fairway`` (chosen setting) on every evaluation
   scenario; per family, Fairway's TTFT p50 and p99 against the best built-in on
   that metric (mean ratio over the three instances, and its range).
3. **Ablation, on the evaluation split.** Each of Fairway's rules switched off or
   changed in turn, against ``shortest-prefill-first``: what each rule costs or
   buys at p50 and p99.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from bench.config import compose_bench, resolve_bench
from bench.frontier import Metric, plot_families, verdict_lines
from bench.report import fmt
from bench.run import run_bench
from bench.scripts.common import add_output_args, git_commit
from bench.scripts.splits import BEST_OF, BUILTINS, COMMON, EVALUATION, TIE, TUNING, Scenario, families
from bench.traces.paths import REPO_ROOT
from compose.progress import Progress

FAIRWAY_YAML = REPO_ROOT / "conf" / "policy" / "fairway.yaml"
GRID: dict[str, tuple[Any, ...]] = {
    "queue_threshold": (0, 8, 32, 128),
    "aging_weight": (0.0, 0.25, 1.0, 4.0),
    "cap_ratio": (0.5, 1.0, 2.0, 4.0, 8.0, 16.0),
    "cap_floor_tokens": (0, 2048, 8192, 32768),
}
#: Where the coordinate search starts (the technique's description: aging on, a 4x cap).
SWEEP_START: dict[str, Any] = {"queue_threshold": 32, "aging_weight": 1.0, "cap_ratio": 4.0,
                               "cap_floor_tokens": 2048}
POLICIES = (*BUILTINS, "shortest_prefill", "fairway")
P99_SLACK = 1.1
#: Ablation variants: (label, overrides on top of the chosen setting).
ABLATION: tuple[tuple[str, dict[str, Any]], ...] = (
    ("chosen", {}),
    ("no cap (queue_threshold=10^9: cheap-first only)", {"queue_threshold": 10**9}),
    ("cap always (queue_threshold=0)", {"queue_threshold": 0}),
    ("aging on (aging_weight=1)", {"aging_weight": 1.0}),
    ("tighter cap (cap_ratio=2)", {"cap_ratio": 2.0}),
)

#: One trial of the sweep: the setting, its score, whether it is admissible.
Trial = tuple[dict[str, Any], float, bool]


def overrides(sc: Scenario, policy: str, params: dict[str, Any] | None = None) -> list[str]:
    out = [*sc.overrides, *COMMON, f"+policy={policy}"]
    return out + [f"policy.{k}={v}" for k, v in (params or {}).items()]


def runs_total() -> int:
    """Bench runs of a full ``main``: FCFS and every grid value on the tuning split (a value
    already tried counts as a run skipped), then the evaluation split's policies and ablations."""
    tuning = len(TUNING) * (1 + sum(len(values) for values in GRID.values()))
    return tuning + len(EVALUATION) * (len(POLICIES) + len(ABLATION) - 1)


def ttft(sc: Scenario, policy: str, params: dict[str, Any] | None, results: Path,
         bar: Progress | None = None) -> dict[str, Any]:
    ov = overrides(sc, policy, params)
    settings = resolve_bench(compose_bench([*ov, "output.progress=false", "output.plots=false"]))
    tag = "_".join(f"{k}={v}" for k, v in (params or {}).items()) or "default"
    if bar is not None:
        bar.status(f"{sc.name} {policy} {tag}")
    summary = run_bench(settings, results / sc.name.replace(" ", "_") / policy / tag)["summary"]
    if bar is not None:
        bar.update()
    return {"p50": summary["ttft_s"]["p50"], "p90": summary["ttft_s"]["p90"],
            "p99": summary["ttft_s"]["p99"], "finished": summary["finished"],
            "requests": summary["requests"], "cmd": "python -m bench " + " ".join(ov)}


def sweep(results: Path, bar: Progress | None = None) -> tuple[dict[str, Any], list[Trial],
                                                                dict[str, dict[str, Any]]]:
    """One round of coordinate search on ``TUNING``; the best setting, every trial, FCFS's runs."""
    fcfs = {sc.name: ttft(sc, "fcfs", None, results / "tuning", bar) for sc in TUNING}
    best, best_score = dict(SWEEP_START), float("inf")
    trials: list[Trial] = []
    cache: dict[tuple[tuple[str, Any], ...], tuple[float, bool]] = {}
    for name, values in GRID.items():
        for value in values:
            params = {**best, name: value}
            key = tuple(sorted(params.items()))
            if key not in cache:
                runs = {sc.name: ttft(sc, "fairway", params, results / "tuning", bar) for sc in TUNING}
                ok = all(runs[n]["p99"] <= P99_SLACK * fcfs[n]["p99"] for n in runs)
                score = sum(runs[n]["p50"] / fcfs[n]["p50"] for n in runs) / len(runs)
                cache[key] = (score, ok)
                trials.append((params, score, ok))
                _say(bar, f"sweep {params}: score {score:.3f} admissible={ok}")
            elif bar is not None:
                bar.update(len(TUNING))  # NOTE: tried already: its runs count as done (runs_total)
            score, ok = cache[key]
            if ok and score < best_score:
                best, best_score = params, score
    return best, trials, fcfs


def _say(bar: Progress | None, line: str) -> None:
    """``line`` on stdout, above the bar (if any) on a terminal."""
    if bar is None:
        print(line, flush=True)
    else:
        bar.write(line, file=sys.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check-defaults", action="store_true")
    add_output_args(ap, "fairway", "fairway")
    args = ap.parse_args()
    t0, commit = time.perf_counter(), git_commit()
    table: dict[str, dict[str, Any]] = {}
    with Progress(runs_total(), "fairway", unit="run") as bar:
        best, trials, _ = sweep(args.results, bar)
        _say(bar, f"chosen on the tuning split: {best}")
        for sc in EVALUATION:
            table[sc.name] = {p: ttft(sc, p, best if p == "fairway" else None, args.results / "evaluation", bar)
                              for p in POLICIES}
            for label, change in ABLATION[1:]:
                table[sc.name][label] = ttft(sc, "fairway", {**best, **change}, args.results / "ablation", bar)
            _say(bar, f"{sc.name}: " + ", ".join(f"{p} {table[sc.name][p]['p50']:.2f}/{table[sc.name][p]['p99']:.1f}"
                                                  for p in POLICIES))
    args.out.write_text(render(table, best, trials, commit, time.perf_counter() - t0))
    frontier_plot(table, args.out.with_name(FRONTIER_PNG))
    print(f"wrote {args.out}")
    defaults = {k: v for k, v in yaml.safe_load(FAIRWAY_YAML.read_text()).items() if k in GRID}
    if defaults != best:
        msg = f"conf/policy/fairway.yaml holds {defaults}; the tuning split chose {best}"
        if args.check_defaults:
            raise SystemExit(msg)
        print("NOTE: " + msg)


FRONTIER_METRICS = (Metric("p50", "TTFT p50", tolerance=TIE), Metric("p99", "TTFT p99", tolerance=TIE))
FRONTIER_PNG = "fairway_frontier.png"


def frontier_points(table: dict[str, dict[str, Any]]) -> dict[str, dict[str, tuple[float, float]]]:
    """Per scenario, Fairway's and every built-in's (TTFT p50, p99): ``FRONTIER_METRICS``."""
    return {name: {p: (row[p]["p50"], row[p]["p99"]) for p in (*BEST_OF, "fairway")} for name, row in table.items()}


def frontier_plot(table: dict[str, dict[str, Any]], path: Path) -> None:
    """The frontier plot per scenario family (``bench.frontier.plot_families``)."""
    points = frontier_points(table)
    plot_families({fam: {sc.name: points[sc.name] for sc in scs} for fam, scs in families(EVALUATION).items()},
                  "fairway", BEST_OF, FRONTIER_METRICS, path, "Fairway vs SGLang's orders, evaluation split")


def _ratio_cells(rows: list[dict[str, Any]], metric: str, against: str | None) -> str:
    """Mean (min-max) over instances of fairway's metric / the best built-in's (or ``against``'s)."""
    ratios, winners = [], []
    for row in rows:
        ref = against or min(BEST_OF, key=lambda p: row[p][metric])
        ratios.append(row["fairway"][metric] / row[ref][metric])
        winners.append(ref)
    r = np.array(ratios)
    who = "" if against else " vs " + "/".join(sorted(set(winners)))
    return f"{r.mean():.2f} ({r.min():.2f}-{r.max():.2f}){who}"


def render(table: dict[str, dict[str, Any]], best: dict[str, Any], trials: list[Trial], commit: str,
           wall_s: float) -> str:
    groups = families(EVALUATION)
    lines = ["# Fairway in the simulator", "",
             f"Produced by `python -m bench.scripts.fairway` at commit {commit} "
             f"({datetime.now(UTC):%Y-%m-%d}, {wall_s / 60:.0f} min). One H100 with Llama-3.1-8B "
             "(roofline cost model; compare rows, not absolute numbers). Tuned on the tuning split, judged on "
             "the evaluation split (docs/evaluation.md; scenarios: `bench/scripts/splits.py`).", "",
             f"Setting chosen on the tuning split: `{best}`.", "",
             "## Verdict: Fairway vs the best SGLang built-in, evaluation split", "",
             "Per family: Fairway's TTFT / the best built-in's on that metric in each instance (lower is "
             "better; < 1 = Fairway wins), mean over the 3 instances (min-max), and which built-in was best "
             "(`lof` is left out: here it reads the true output length).", "",
             "| family | p50 ratio | p99 ratio | p50 vs SPF | p99 vs SPF |", "|---|---|---|---|---|"]
    for fam, scs in groups.items():
        rows = [table[sc.name] for sc in scs]
        lines.append(f"| {fam} | {_ratio_cells(rows, 'p50', None)} | {_ratio_cells(rows, 'p99', None)} | "
                     f"{_ratio_cells(rows, 'p50', 'shortest-prefill-first')} | "
                     f"{_ratio_cells(rows, 'p99', 'shortest-prefill-first')} |")
    lines += ["", "## Frontier verdict: Fairway against every built-in on TTFT p50 and p99, evaluation split", "",
              "Per scenario, both metrics at once (`bench/frontier.py`): *dominated* when some built-in is no "
              "worse on both and better on one; *on the frontier* when none is, naming the built-ins better "
              f"on each metric; *equals* / *dominates* otherwise. Values within {TIE:.0%} count as equal; "
              "`lof` left out (an oracle here).", ""]
    lines += verdict_lines(frontier_points(table), "fairway", BEST_OF, FRONTIER_METRICS)
    lines += ["", f"Per family, every instance ([{FRONTIER_PNG}]({FRONTIER_PNG})): each row's TTFT p50 and p99 "
              "over the best built-in's on that instance (below and left of (1, 1): better on both).", ""]
    lines += ["", "## Ablation: what each rule costs or buys, vs `shortest-prefill-first` (evaluation split)", "",
              "Each row changes one thing in the chosen setting; cells: mean over the family's instances of "
              "the variant's TTFT p50 / SPF's, p99 / SPF's.", "",
              "| variant | " + " | ".join(groups) + " |", "|---|" + "---|" * len(groups)]
    for label, _ in ABLATION:
        key = "fairway" if label == "chosen" else label
        cells = []
        for scs in groups.values():
            p50 = np.mean([table[sc.name][key]["p50"] / table[sc.name]["shortest-prefill-first"]["p50"] for sc in scs])
            p99 = np.mean([table[sc.name][key]["p99"] / table[sc.name]["shortest-prefill-first"]["p99"] for sc in scs])
            cells.append(f"{p50:.2f} / {p99:.2f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "## TTFT p50 / p90 / p99 (s), evaluation split", "",
              "| scenario | " + " | ".join(POLICIES) + " |", "|---|" + "---|" * len(POLICIES)]
    for name, row in table.items():
        cells = [f"{fmt(row[p]['p50'])} / {fmt(row[p]['p90'])} / {fmt(row[p]['p99'])}" for p in POLICIES]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "## Sweep (tuning split)", "",
              "Score = mean over the tuning scenarios (" + ", ".join(sc.name for sc in TUNING)
              + f") of fairway p50 / fcfs p50 (lower is better); admissible = p99 <= {P99_SLACK}x "
              f"fcfs p99 in each of them. Start: `{SWEEP_START}`.", "",
              "| " + " | ".join(GRID) + " | score | admissible |", "|---|" + "---|" * (len(GRID) + 1)]
    for params, score, ok in trials:
        lines.append("| " + " | ".join(str(params[k]) for k in GRID) + f" | {score:.3f} | {'yes' if ok else 'no'} |")
    lines += ["", "## Commands (evaluation split)", "", "```"]
    for row in table.values():
        lines += [row[p]["cmd"] for p in POLICIES]
    lines += ["```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
