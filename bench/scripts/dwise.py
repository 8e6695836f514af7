"""DWISE vs SGLang's stock dLLM scheduling vs an oracle, in the dLLM simulator -> ``bench/results/dwise.md``.

    python -m bench.scripts.dwise                 # ~3 min on one core
    python -m bench.scripts.dwise --out /tmp/d.md

The dLLM simulator (``bench/sim/dllm``, ``sim.dllm.enabled=true``): SGLang
0.5.23's diffusion-LM rounds (FDFO), block size 4, every generation block
taking ``k + 1`` rounds for ``k`` masks (``tiny_live``, measured on the tiny
random SDAR), a round costing 13 ms + 3.3 ms per block (``cpu_tiny``, measured
on the live CPU server by ``bench.scripts.dwise_live``'s probe). Two
workloads, each the real trace's prompt and output lengths shaped the way the
project shapes them for the CPU server (so the live CPU replay can send the
same requests to the tiny SDAR, context 2048), each at three loads.

Rows:

* **stock, best**: SGLang's own dLLM scheduling (no ``+policy``: FCFS into
  the slots, non-preemptive, prompt blocks first; every admitted request runs
  each round) at the ``sim.max_running_requests`` the tuning split chose from
  ``STOCK_SLOTS_SWEEP``: the best of SGLang's built-ins (its dLLM path has one
  order; its knob is the slot count, which is also its round capacity);
* **stock, equal capacity**: the same at ``max_running_requests`` = DWISE's
  ``round_blocks``, the same compute per round as DWISE;
* **DWISE**: ``+policy=dwise``, its round shape (``slots``, ``round_blocks``),
  ``max_wait_rounds`` and ``prior_rounds`` chosen on the tuning split (and
  kept in ``conf/policy/dwise.yaml``);
* **oracle**: the same with ``sim.dllm.oracle=true``: DWISE's order and aging
  with the true remaining rounds (bench-only).

Load: offered block work over what the device runs in full rounds of
``LOAD_BLOCKS`` blocks: ``rho = sum over requests of (prompt blocks + true
denoising rounds) x LOAD_BLOCK_S / window length``, ``LOAD_BLOCK_S`` a block's
share of such a round, set per window by ``trace.time_scale`` from the shaped
trace alone (never from a policy's result). A round's fixed cost is paid
whatever its blocks, so bigger rounds run more blocks a second and an order
that leaves rounds part-empty (stock's prompt-only rounds, a queue shorter
than the capacity) gets less: rho is a scale, not a utilisation.

Protocol (as ``bench/scripts/splits.py``): parameters are chosen on tuning
windows from the traces' first half hour; the table reports windows from the
second half hour, which the choice never saw. Stock first: the slot count with
the lowest mean (over tuning scenarios) of log mean E2E. DWISE then, against
that stock, by coordinate search: the round shape over ``SHAPE_SWEEP`` at the
configured aging and prior, ``max_wait_rounds`` over ``WAIT_SWEEP``, then
``prior_rounds`` over ``PRIOR_SWEEP``. Choice rule: the lowest mean (over tuning
scenarios) of DWISE's mean E2E / stock's, among settings whose E2E p99 stays
within ``P99_SLACK`` x stock's in every tuning scenario (if none does, the
lowest worst-case p99 ratio); means within ``TIE`` of the lowest count as
equal, and among equals the search's current value stays (a coordinate moves
only for a gain), else the sweep's first (the smaller round, the stronger
aging). The search starts at ``START`` (the smallest round, the strongest
aging, the largest prior: its reasons beside it), written in the script, never
read from the config; ``--check-defaults`` fails when
``conf/policy/dwise.yaml`` holds other values than the search chose.

Estimator rank quality: Spearman of DWISE's arrival estimate (its regression
on the prompt, learning online as in the run, read when the request is first
ranked) against the request's true denoising rounds, on the reported DWISE
runs. The simulator has no prompt text (words and lines are 0) and no hidden
states (no refiner), so the estimate uses the prompt's token count only.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

from bench.scripts.common import add_output_args, git_commit
from bench.scripts.dwise_report import render
from bench.scripts.dwise_setup import (
    BEST_STOCK_SLOTS,
    CLIENT_CAP,
    CONFIGURED,
    GPU_LOAD,
    LOADS,
    P99_SLACK,
    PARAMS,
    PRIOR_SWEEP,
    ROWS,
    SHAPE_SWEEP,
    START,
    STOCK_SLOTS_SWEEP,
    TIE,
    TUNE_LOADS,
    WAIT_SWEEP,
    WORKLOADS,
    Workload,
    e2e,
    row_overrides,
    run,
    time_scale,
    window_overrides,
)
from compose.progress import Progress


def choose(scores: dict[Any, list[tuple[dict[str, Any], dict[str, Any]]]], current: Any) -> tuple[Any, bool]:
    """The setting the rule picks from (dwise, stock) run pairs per setting, in sweep order (module docs)."""
    ok = [k for k, pairs in scores.items() if all(e2e(d, "p99") <= P99_SLACK * e2e(s, "p99") for d, s in pairs)]
    if ok:
        mean = {k: float(np.mean([e2e(d, "mean") / e2e(s, "mean") for d, s in scores[k]])) for k in ok}
        tied = [k for k in ok if mean[k] <= min(mean.values()) * (1 + TIE)]
        return (current if current in tied else tied[0]), True
    return min(scores, key=lambda k: max(e2e(d, "p99") / e2e(s, "p99") for d, s in scores[k])), False


def runs_total() -> int:
    """Simulated runs of a full ``main``: the tuning sweeps (a DWISE setting already tried counts
    as runs skipped), then every reported cell's rows and the client-cap DWISE reruns."""
    bases = len(WORKLOADS) * len(TUNE_LOADS)
    tuning = bases * (len(STOCK_SLOTS_SWEEP) + len(SHAPE_SWEEP) + len(WAIT_SWEEP) + len(PRIOR_SWEEP))
    return tuning + len(WORKLOADS) * (len(LOADS) * (len(ROWS) + 1) + len(ROWS))


def counted(overrides: list[str], bar: Progress | None) -> dict[str, Any]:
    """``run(overrides)``, advancing ``bar`` by one run."""
    out = run(overrides)
    if bar is not None:
        bar.update()
    return out


def tune(progress: Any, bar: Progress | None = None) -> dict[str, Any]:
    """Stock's slots, then DWISE's coordinate search, on the tuning windows (module docs)."""
    bases = [window_overrides(w, w.tuning, time_scale(w, w.tuning, rho)) for w in WORKLOADS for rho in TUNE_LOADS]
    stock_sweep = {n: [counted(row_overrides(b, "stock", {"slots": n}, None), bar) for b in bases]
                   for n in STOCK_SLOTS_SWEEP}
    for n, runs in stock_sweep.items():
        progress(f"tuning stock, {n} slots: mean E2E " + ", ".join(f"{e2e(r, 'mean'):.2f}" for r in runs) + " s")
    best = min(STOCK_SLOTS_SWEEP, key=lambda n: float(np.mean([np.log(e2e(r, "mean")) for r in stock_sweep[n]])))
    stock = stock_sweep[best]
    params: dict[str, float] = dict(START)
    done: dict[tuple[float, ...], list[dict[str, Any]]] = {}
    met: dict[str, bool] = {}
    coords: tuple[tuple[str, tuple[Any, ...]], ...] = (
        ("round shape", SHAPE_SWEEP), ("max_wait_rounds", WAIT_SWEEP), ("prior_rounds", PRIOR_SWEEP))
    for key, values in coords:
        scores = {}
        for v in values:
            trial = {**params, **({"slots": v[0], "round_blocks": v[1]} if key == "round shape" else {key: v})}
            tag = tuple(float(trial[k]) for k in PARAMS)
            if tag not in done:  # NOTE: each coordinate revisits the previous one's choice
                done[tag] = [counted(row_overrides(b, "dwise", trial, None), bar) for b in bases]
                progress(f"tuning {trial}: mean E2E vs stock " + ", ".join(
                    f"{e2e(d, 'mean') / e2e(s, 'mean'):.2f}" for d, s in zip(done[tag], stock, strict=True)))
            elif bar is not None:
                bar.update(len(bases))  # NOTE: tried already: its runs count as done (runs_total)
            scores[v] = list(zip(done[tag], stock, strict=True))
        current = ((params["slots"], params["round_blocks"]) if key == "round shape" else params[key])
        chosen, met[key] = choose(scores, current)
        params.update({"slots": chosen[0], "round_blocks": chosen[1]} if key == "round shape" else {key: chosen})
    sweep = [{"params": dict(zip(PARAMS, tag, strict=True)), "runs": r, "stock": stock} for tag, r in done.items()]
    return {"params": params, "met": met, "sweep": sweep, "stock_slots": best, "stock_sweep": stock_sweep}


def cell_of(w: Workload, rho: float, gpu: bool, chosen: dict[str, Any],
            bar: Progress | None = None) -> dict[str, Any]:
    """One reported scenario: every row on the reported window at load ``rho``."""
    params = chosen["params"]
    scale = time_scale(w, w.report, rho, gpu=gpu)
    base = window_overrides(w, w.report, scale, gpu=gpu)
    # row -> (row_overrides' row, its params)
    rows = {"stock": ("stock", {"slots": chosen["stock_slots"]}), "stock_eq": ("stock", {"slots": params["round_blocks"]}),
            "dwise": ("dwise", params), "oracle": ("oracle", params)}
    assert tuple(rows) == ROWS
    return {"workload": w.name, "rho": rho, "scale": scale, "cap": None, "gpu": gpu, "base": base,
            **{row: counted(row_overrides(base, kind, p, None), bar) for row, (kind, p) in rows.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_output_args(ap, "dwise", "dwise")
    ap.add_argument("--check-defaults", action="store_true",
                    help="fail unless conf/policy/dwise.yaml and BEST_STOCK_SLOTS hold what the tuning chose")
    args = ap.parse_args()
    commit, t0 = git_commit(), time.perf_counter()

    table: list[dict[str, Any]] = []
    with Progress(runs_total(), "dwise", unit="run") as bar:

        def progress(msg: str) -> None:
            bar.write(f"[{time.perf_counter() - t0:5.0f} s] {msg}", file=sys.stdout)

        chosen = tune(progress, bar)
        params = chosen["params"]
        progress(f"chosen on the tuning split: stock {chosen['stock_slots']} slots, DWISE {params}")
        for w in WORKLOADS:
            for rho in LOADS:
                cell = cell_of(w, rho, False, chosen, bar)
                # NOTE: stock and the oracle never read max_new_tokens (the cap is above every shaped
                # output): the client-cap cell shares their runs and reruns DWISE only
                capped = {**cell, "cap": CLIENT_CAP,
                          "dwise": counted(row_overrides(cell["base"], "dwise", params, CLIENT_CAP), bar)}
                table += [cell, capped]
                for c in (cell, capped):
                    progress(f"{w.name} rho {rho} cap {c['cap']}: mean E2E stock {e2e(c['stock'], 'mean'):.1f} s "
                             f"(equal capacity {e2e(c['stock_eq'], 'mean'):.1f} s), "
                             f"DWISE {e2e(c['dwise'], 'mean'):.1f} s, oracle {e2e(c['oracle'], 'mean'):.1f} s")
        for w in WORKLOADS:
            cell = cell_of(w, GPU_LOAD, True, chosen, bar)
            table.append(cell)
            progress(f"{w.name} GPU-ish rho {GPU_LOAD}: mean E2E stock {e2e(cell['stock'], 'mean'):.1f} s, "
                     f"DWISE {e2e(cell['dwise'], 'mean'):.1f} s, oracle {e2e(cell['oracle'], 'mean'):.1f} s")
    wall = time.perf_counter() - t0
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "runs.json").write_text(json.dumps({**chosen, "table": table}, indent=1, default=str))
    previous = args.out.read_text() if args.out.exists() else ""
    args.out.write_text(render(table, chosen, commit, wall, previous))
    print(f"wrote {args.out} ({wall / 60:.1f} min)")
    stale = []
    if {k: float(v) for k, v in params.items()} != CONFIGURED:
        stale.append(f"conf/policy/dwise.yaml holds {CONFIGURED}; the tuning split chose {params}")
    if chosen["stock_slots"] != BEST_STOCK_SLOTS:
        stale.append(f"BEST_STOCK_SLOTS is {BEST_STOCK_SLOTS}; the tuning split chose {chosen['stock_slots']}")
    if stale and args.check_defaults:
        raise SystemExit("; ".join(stale))
    for message in stale:
        print("NOTE: " + message)


if __name__ == "__main__":
    main()
