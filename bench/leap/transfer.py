"""How a length predictor's measured error enters the simulator, and what LEAP then does there.

Two ways to carry a predictor's live error to a trace it was not measured on:

* **log-error**: the simulated signal is ``log(1 + true) + N(mean, std)`` with the
  predictor's live log-error mean and std (``bench/sim/signal.py``). The error's
  size transfers; the rank quality it leaves depends on how widely the trace's
  outputs spread (a trace of long and short outputs keeps more of the order).
* **rank-matched**: per scenario, the std for which the simulated signal's
  Spearman against that trace's true output lengths equals the predictor's live
  Spearman (bisection over the same seeded draws). The rank quality transfers.

Rows: FCFS and every built-in of ``BEST_OF`` once per scenario, LEAP (at its
configured ``aging_tokens``) under each error model, and LEAP's prompt-length
regression on the trace's own prompt lengths (``policy.features=prompt_length``,
no simulated signal), on ``bench.scripts.leap_sim``'s evaluation split.

NOTE: a rank-matched std needs the scenario's output lengths: it is found from
the FCFS run's finished requests, so LEAP's rows run after the built-ins'.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.config import compose_bench, resolve_bench
from bench.frontier import verdict
from bench.run import run_bench
from bench.scripts.common import option_default, run_rows
from bench.scripts.leap_curve import spearman
from bench.scripts.leap_sim import FRONTIER_METRICS, per_token, row_overrides
from bench.scripts.splits import BEST_OF, COMMON, EVALUATION, Scenario, families
from bench.sim.signal import LengthSignal

#: The simulator's signal seed (``sim.length_signal_seed``'s default).
SIGNAL_SEED = 0


@dataclass(frozen=True)
class ErrorModel:
    """One LEAP row's length-signal error: ``std`` fixed (log-error) or, with ``target_spearman``,
    found per scenario (rank-matched)."""

    label: str
    mean: float
    std: float | None = None
    target_spearman: float | None = None

    def __post_init__(self) -> None:
        if (self.std is None) == (self.target_spearman is None):
            raise ValueError(f"{self.label}: give std or target_spearman, not both or neither")


def error_models(found: dict[str, Any], curve: dict[str, Any]) -> list[ErrorModel]:
    """The templated set's head (``leap_curve.json``), then every public-set predictor log-error,
    then rank-matched."""
    judged = found["judged"]
    return [ErrorModel("LEAP head, templated set", curve["log_error_mean"], std=curve["log_error_std"]),
            *(ErrorModel(f"{name}, public set", j["log_error_mean"], std=j["log_error_std"])
              for name, j in judged.items()),
            *(ErrorModel(f"{name}, public set, rank-matched", j["log_error_mean"], target_spearman=j["spearman"])
              for name, j in judged.items())]


def signal_spearman(outputs: list[tuple[str, int]], std: float, mean: float) -> float:
    """Spearman of the simulated signal against the true lengths of ``outputs`` (rid, tokens)."""
    signal = LengthSignal(std, mean, SIGNAL_SEED)
    return spearman([signal.features(rid, n)[0] for rid, n in outputs], [n for _, n in outputs])


def rank_matched_std(outputs: list[tuple[str, int]], target: float, mean: float) -> float:
    """The std whose simulated signal has Spearman ``target`` on ``outputs`` (bisection, 1e-3 in log)."""
    if target >= signal_spearman(outputs, 0.0, mean):
        return 0.0
    lo, hi = 0.0, 1.0
    while signal_spearman(outputs, hi, mean) > target:
        lo, hi = hi, hi * 2
        if hi > 1e4:
            raise ValueError(f"no std brings the signal's Spearman down to {target}")
    while hi - lo > 1e-3:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if signal_spearman(outputs, mid, mean) > target else (lo, mid)
    return (lo + hi) / 2


def _finished(folder: Path) -> list[dict[str, str]]:
    """A run's finished requests (rows of its ``requests.csv``)."""
    with open(folder / "requests.csv") as f:
        return [r for r in csv.DictReader(f) if r["status"] == "finished"]


def finished_outputs(folder: Path) -> list[tuple[str, int]]:
    """``(rid, output tokens)`` of a run's finished requests."""
    return [(r["rid"], int(r["output_tokens"])) for r in _finished(folder)]


#: One simulator run: scenario, policy, and for LEAP its label and (std, mean).
SimKey = tuple[Scenario, str, tuple[str, float, float] | None]
#: The row of LEAP reading the trace's own prompt lengths (its label; ``SimKey``'s policy).
TRACE_PROMPTS = "prompt-length regression, trace's own prompts"


def _label(key: SimKey) -> str:
    return key[2][0] if key[2] else key[1]


def _folder(results: Path, key: SimKey) -> Path:
    sc, label = key[0], _label(key)
    return results / sc.name.replace(" ", "_") / label.replace(" ", "_").replace(",", "")


def sim_run(key: SimKey, results: Path) -> dict[str, Any]:
    sc, policy, model = key
    _, std, mean = model if model else ("", 0.0, 0.0)
    aging = f"policy.aging_tokens={option_default('policy', 'leap', 'aging_tokens')}"
    if policy == TRACE_PROMPTS:  # NOTE: the row's inputs: LEAP's own option, no simulated signal
        ov = [*sc.overrides, *COMMON, "+policy=leap", "policy.features=prompt_length", aging]
    else:
        ov = row_overrides(sc, policy, std, mean) + ([aging] if policy == "leap" else [])
    settings = resolve_bench(compose_bench([*ov, "output.progress=false", "output.plots=false"]))
    folder = _folder(results, key)
    row: dict[str, Any] = {"summary": run_bench(settings, folder)["summary"], "std": std if model else None,
                           "cmd": "python -m bench " + " ".join(ov)}
    if model is not None:  # NOTE: the rank quality the simulated signal had on this trace
        row["signal_spearman"] = signal_spearman(finished_outputs(folder), std, mean)
    elif policy == TRACE_PROMPTS:  # NOTE: the rank quality of the prompt length on this trace
        done = _finished(folder)
        row["signal_spearman"] = spearman([int(r["input_tokens"]) for r in done],
                                          [int(r["output_tokens"]) for r in done])
    return row


def simulate(models: list[ErrorModel], results: Path, jobs: int) -> dict[str, dict[str, dict[str, Any]]]:
    """Per evaluation scenario: every built-in of ``BEST_OF``, then LEAP under each error model."""
    def describe(k: SimKey) -> str:
        return f"{k[0].name} {_label(k)}"

    builtin_keys: list[SimKey] = [(sc, b, None) for sc in EVALUATION for b in BEST_OF]
    rows = run_rows("leap_predictors built-ins", builtin_keys, sim_run, results, jobs, describe)
    leap_keys: list[SimKey] = []
    for sc in EVALUATION:
        outputs = finished_outputs(_folder(results, (sc, "fcfs", None)))
        for m in models:
            std = m.std if m.std is not None else rank_matched_std(outputs, float(m.target_spearman or 0), m.mean)
            leap_keys.append((sc, "leap", (m.label, std, m.mean)))
        leap_keys.append((sc, TRACE_PROMPTS, None))
    rows |= run_rows("leap_predictors LEAP", leap_keys, sim_run, results, jobs, describe)
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for key, row in rows.items():
        table.setdefault(key[0].name, {})[_label(key)] = row
    return table


def _point(row: dict[str, Any]) -> tuple[float, ...]:
    return tuple(m.of(row["summary"]) for m in FRONTIER_METRICS)


def _std_cell(stds: list[float | None]) -> str:
    return "" if None in stds else f" (std {np.mean([s for s in stds if s is not None]):.2f})"


def _short(outcome: str, by: tuple[str, ...]) -> str:
    return f"dominated ({', '.join(by)})" if outcome == "dominated" else outcome


def sim_section(models: list[ErrorModel], table: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """The simulator section of ``leap_predictors.md``."""
    labels = [m.label for m in models] + [TRACE_PROMPTS]
    fams = families(EVALUATION)
    lines = ["## Latency after scheduling, simulator (evaluation split)", "",
             "`bench.scripts.leap_sim`'s evaluation scenarios (one H100, Llama-3.1-8B roofline), LEAP at its "
             "configured `aging_tokens`, its simulated length signal log(1 + true output) + N(mean, std) "
             "(`bench/leap/transfer.py`): *log-error* rows take the std the predictor showed live; "
             "*rank-matched* rows take, per scenario, the std at which the signal's Spearman against that "
             "trace's true lengths equals the predictor's live Spearman. The last row is LEAP's "
             "`policy.features=prompt_length` on the trace's own prompt lengths (no simulated signal). The "
             "simulator charges no predictor cost (the cost column above is separate).", "",
             "Mean per-token latency, LEAP vs FCFS / vs the best built-in (of "
             f"{', '.join(f'`{b}`' for b in BEST_OF)}; `lof` is an oracle in the simulator), mean over each "
             "family's instances:", "",
             "| error model | " + " | ".join(fams) + " |", "|---|" + "---|" * len(fams)]
    for label in labels:
        cells = []
        for scs in fams.values():
            vs_fcfs = np.mean([per_token(table[sc.name][label]) / per_token(table[sc.name]["fcfs"]) - 1
                               for sc in scs])
            vs_best = np.mean([per_token(table[sc.name][label])
                               / min(per_token(table[sc.name][b]) for b in BEST_OF) - 1 for sc in scs])
            cells.append(f"{vs_fcfs:+.1%} / {vs_best:+.1%}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "The signal on each trace: its Spearman against the true output length, and the "
              "std used (mean over the family's instances; the last row: the prompt length's own Spearman):", "",
              "| error model | " + " | ".join(fams) + " |", "|---|" + "---|" * len(fams)]
    for label in labels:
        lines.append(f"| {label} | " + " | ".join(
            f"{np.mean([table[sc.name][label]['signal_spearman'] for sc in scs]):.2f}"
            + _std_cell([table[sc.name][label]["std"] for sc in scs]) for scs in fams.values()) + " |")
    lines += ["", "Frontier verdict per scenario against every built-in (mean per-token latency, mean E2E, "
              "TTFT p99; `bench/frontier.py`, values within 1% equal):", "",
              "| scenario | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    outcomes: dict[str, list[str]] = {label: [] for label in labels}
    for name, rows in table.items():
        cells = []
        for label in labels:
            v = verdict(_point(rows[label]), {b: _point(rows[b]) for b in BEST_OF}, FRONTIER_METRICS)
            outcomes[label].append(v.outcome)
            cells.append(_short(v.outcome, v.by))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    base = outcomes[labels[0]]
    lines += ["", f"| error model | dominates | equals | frontier | dominated | verdicts unlike `{labels[0]}`'s |",
              "|---|---|---|---|---|---|"]
    for label in labels:
        o = outcomes[label]
        lines.append(f"| {label} | " + " | ".join(str(o.count(k)) for k in ("dominates", "equals", "frontier",
                                                                             "dominated"))
                     + f" | {sum(a != b for a, b in zip(o, base))} of {len(o)} |")
    lines += ["", "Mean per-token latency (ms) per scenario:", "",
              "| scenario | " + " | ".join([*BEST_OF, *labels]) + " |", "|---|" + "---|" * (len(BEST_OF) + len(labels))]
    for name, rows in table.items():
        lines.append(f"| {name} | " + " | ".join(f"{per_token(rows[c]) * 1e3:.1f}" for c in [*BEST_OF, *labels]) + " |")
    lines += ["", "## Commands (evaluation split)", "", "```"]
    for c in [*BEST_OF, *labels]:
        lines += [f"# {c}", *(rows[c]["cmd"] for rows in table.values())]
    return [*lines, "```", ""]
