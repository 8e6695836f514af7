"""DWISE vs SGLang's stock dLLM scheduling vs an oracle, in the dLLM simulator -> ``bench/results/dwise.md``.

    python -m bench.scripts.dwise                 # ~10 min on one core
    python -m bench.scripts.dwise --out /tmp/d.md

The dLLM simulator (``bench/sim/dllm``, ``sim.dllm.enabled=true``): SGLang
0.5.23's diffusion-LM rounds (FDFO), block size 4, every generation block
taking ``k + 1`` rounds for ``k`` masks (``tiny_live``, measured on the tiny
random SDAR), 30 ms per block per round (``cpu_tiny``, measured). Two
workloads, each the real trace's prompt and output lengths shaped the way the
project shapes them for the CPU server (so the live CPU replay can send the
same requests to the tiny SDAR, context 2048), each at three loads.

Rows, at equal round capacity (``round_blocks`` blocks per round):

* **stock**: SGLang's own dLLM scheduling (no ``+policy``) with
  ``sim.max_running_requests = round_blocks``: FCFS into the slots,
  non-preemptive, prompt blocks first;
* **DWISE**: ``+policy=dwise`` (slots and round capacity from
  ``conf/policy/dwise.yaml``), ``max_wait_rounds`` and ``prior_rounds`` chosen
  on the tuning split;
* **oracle**: the same with ``sim.dllm.oracle=true``: DWISE's order and aging
  with the true remaining rounds (bench-only).

Load: offered block work over what the device runs: ``rho = sum over requests
of (prompt blocks + true denoising rounds) x 30 ms / window length``, set per
window by ``trace.time_scale`` from the shaped trace alone (never from a
policy's result). With ``cpu_tiny`` a round's time is linear in its blocks, so
the throughput is the same for every policy; only the order differs.

Protocol (as ``bench/scripts/splits.py``): parameters are chosen on tuning
windows from the traces' first half hour; the table reports windows from the
second half hour, which the choice never saw. Choice rule: the lowest mean
(over tuning scenarios) of DWISE's mean E2E / stock's, among settings whose
E2E p99 stays within ``P99_SLACK`` x stock's in every tuning scenario; if none
does, the lowest worst-case p99 ratio. Coordinate search: ``max_wait_rounds``
over ``WAIT_SWEEP`` at the configured prior, then ``prior_rounds`` over
``PRIOR_SWEEP`` at the chosen wait.

Estimator rank quality: Spearman of DWISE's arrival estimate (its regression
on the prompt, learning online as in the run, read when the request is first
ranked) against the request's true denoising rounds, on the reported DWISE
runs. The simulator has no prompt text (words and lines are 0) and no hidden
states (no refiner), so the estimate uses the prompt's token count only.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import yaml  # type: ignore[import-untyped]  # NOTE: no stubs in the venv

from bench.config import BenchSettings, compose_bench, resolve_bench
from bench.metrics import Slo, summarize
from bench.report import fmt
from bench.run import prepare_trace
from bench.scripts.common import add_output_args, git_commit
from bench.scripts.leap_curve import spearman
from bench.sim import CostModel, SimSettings
from bench.sim.dllm import DllmSimulator, RooflineRoundCost, simulate, tiny_live_rounds
from bench.traces.paths import REPO_ROOT
from bench.traces.trace import Trace
from policies.feedback import FinishedView
from policies.scheduling import OrderDecision, QueueView, SchedulingNeeds
from policies.scheduling.dwise import DwisePolicy
from policies.scheduling.rounds import denoise_rounds_bound

DWISE_YAML = yaml.safe_load((REPO_ROOT / "conf" / "policy" / "dwise.yaml").read_text())
SLOTS, ROUND_BLOCKS = int(DWISE_YAML["slots"]), int(DWISE_YAML["round_blocks"])
BLOCK_S = 0.030
SHAPE = ("live.output_scale=0.125", "live.max_input_tokens=1024", "live.max_output_tokens=128")
COMMON = ("sim.dllm.enabled=true", "sim.dllm.rounds_per_block=tiny_live", "output.progress=false")
CPU = ("sim.dllm.round_cost=cpu_tiny", f"sim.dllm.round_block_s={BLOCK_S}")
#: The GPU-ish section: bench/sim/cost.py's roofline on the bench defaults (an assumption, docs/dwise.md).
GPU = ("sim.dllm.round_cost=roofline", "accelerator=h100", "model_profile=llama-3.1-8b")
GPU_LOAD = 0.9
#: Context each block is costed at when the GPU section sets its load (a typical shaped prompt).
GPU_CONTEXT = 256
LOADS = (0.7, 0.85, 0.95)
TUNE_LOADS = (0.85, 0.95)
WAIT_SWEEP = (8, 16, 64, 256, 1024)
PRIOR_SWEEP = (8.0, 32.0, 128.0)
P99_SLACK = 1.25
#: The client-cap variant: every request sends this max_new_tokens (outputs end at their trace length).
CLIENT_CAP = 128


@dataclass(frozen=True)
class Workload:
    """A trace shaped for the CPU tiny SDAR, with a tuning and a reported window (trace seconds)."""

    name: str
    overrides: tuple[str, ...]
    tuning: tuple[int, int]
    report: tuple[int, int]


WORKLOADS = (
    Workload("Azure conversation", ("trace=azure_conversation", "live.input_scale=0.0625", *SHAPE),
             (900, 1020), (2400, 2520)),
    Workload("Mooncake conversation", ("trace=mooncake_conversation", "live.input_scale=0.03125", *SHAPE),
             (900, 1080), (2400, 2580)),
)


class RecordingDwise:
    """``DwisePolicy`` as is, noting each request's estimate when it is first ranked."""

    def __init__(self, inner: DwisePolicy) -> None:
        self.inner = inner
        self.needs: SchedulingNeeds = inner.needs
        self.arrival: dict[str, tuple[float, float]] = {}
        """rid -> (the regression's total denoising rounds, the capped value DWISE ranks by)."""

    def order(self, queue: QueueView) -> OrderDecision:
        for r in queue.requests:
            if r.rid not in self.arrival and r.dllm is not None:
                est = self.inner.estimate_denoise_rounds(r, r.dllm)
                capped = max(est, 1.0)
                if getattr(self.inner, "cap_by_max_new_tokens", True):
                    capped = min(capped, denoise_rounds_bound(r, r.dllm))
                self.arrival[r.rid] = (est, capped)
        return self.inner.order(queue)

    def observe_finished(self, view: FinishedView) -> None:
        self.inner.observe_finished(view)


def settings_of(overrides: list[str]) -> BenchSettings:
    return resolve_bench(compose_bench(overrides))


def shaped(settings: BenchSettings) -> tuple[Trace, CostModel]:
    cost = CostModel(settings.accelerator, settings.model_profile)
    sim_settings = SimSettings.resolve(settings.sim, settings.accelerator, settings.model_profile, cost)
    return prepare_trace(settings, sim_settings)[0], cost


def time_scale(w: Workload, window: tuple[int, int], rho: float, gpu: bool = False,
               block_s: float = BLOCK_S) -> float:
    """``trace.time_scale`` that offers ``rho`` of the device's block throughput (module docs;
    ``gpu``: full rounds of ``ROUND_BLOCKS`` blocks on the roofline, each over ``GPU_CONTEXT`` tokens;
    else ``block_s`` seconds per block)."""
    trace, cost = shaped(settings_of(window_overrides(w, window, 1.0, gpu)))
    if gpu:
        block_s = RooflineRoundCost(cost, 4).round_time([GPU_CONTEXT] * ROUND_BLOCKS) / ROUND_BLOCKS
    work = sum(tiny_live_rounds(r.input_tokens, r.output_tokens, 4) for r in trace.requests) * block_s
    return float(f"{work / (rho * (window[1] - window[0])):.4g}")


def window_overrides(w: Workload, window: tuple[int, int], scale: float, gpu: bool = False) -> list[str]:
    return [*w.overrides, f"trace.window_start_s={window[0]}", f"trace.window_end_s={window[1]}",
            f"trace.time_scale={scale:g}", *COMMON, *(GPU if gpu else CPU)]


def row_overrides(base: list[str], row: str, params: dict[str, Any], cap: int | None) -> list[str]:
    out = list(base) + ([f"sim.dllm.max_new_tokens={cap}"] if cap is not None else [])
    if row == "stock":
        return out + [f"sim.max_running_requests={ROUND_BLOCKS}"]
    out += ["+policy=dwise", *(f"policy.{k}={v:g}" for k, v in params.items())]
    return out + (["sim.dllm.oracle=true"] if row == "oracle" else [])


def run(overrides: list[str]) -> dict[str, Any]:
    """One simulated run; DWISE rows also return their arrival estimates vs the truth."""
    s = settings_of(overrides)
    trace, cost = shaped(s)
    policy = s.build("policy")
    recorder = RecordingDwise(policy) if isinstance(policy, DwisePolicy) and not s.sim.dllm.oracle else None
    t0 = time.perf_counter()
    records, _, meta, sim = simulate(trace, s.sim.dllm, cost, recorder or policy, s.sim.max_running_requests)
    out: dict[str, Any] = {"cmd": "python -m bench " + " ".join(o for o in overrides if o != "output.progress=false"),
                           "summary": summarize(records, Slo(s.metrics.ttft_slo_s, s.metrics.tpot_slo_s)),
                           "rounds": meta["rounds"], "blocks_per_round": meta["mean_blocks_per_round"],
                           "wall_s": time.perf_counter() - t0}
    if recorder is not None:
        out["spearman"] = rank_quality(recorder, sim)
    return out


def rank_quality(recorder: RecordingDwise, sim: DllmSimulator) -> dict[str, float]:
    rids = [rid for rid in recorder.arrival if sim.requests[rid].finished]
    truth = np.array([sim.requests[rid].true_denoise_rounds for rid in rids], dtype=float)
    est = np.array([recorder.arrival[rid] for rid in rids], dtype=float)
    return {"regression": spearman(est[:, 0], truth), "capped": spearman(est[:, 1], truth),
            "requests": float(len(rids))}


def e2e(r: dict[str, Any], key: str) -> float:
    return float(r["summary"]["e2e_s"][key])


def choose(scores: dict[Any, list[tuple[dict[str, Any], dict[str, Any]]]]) -> tuple[Any, bool]:
    """The setting the rule picks from (dwise, stock) run pairs per setting (module docs)."""
    ok = [k for k, pairs in scores.items() if all(e2e(d, "p99") <= P99_SLACK * e2e(s, "p99") for d, s in pairs)]
    if ok:
        return min(ok, key=lambda k: float(np.mean([e2e(d, "mean") / e2e(s, "mean") for d, s in scores[k]]))), True
    return min(scores, key=lambda k: max(e2e(d, "p99") / e2e(s, "p99") for d, s in scores[k])), False


def tune(progress: Any) -> tuple[dict[str, float], list[dict[str, Any]], dict[str, bool]]:
    """Coordinate search on the tuning windows (module docs)."""
    bases = [window_overrides(w, w.tuning, time_scale(w, w.tuning, rho)) for w in WORKLOADS for rho in TUNE_LOADS]
    stock = [run(row_overrides(b, "stock", {}, None)) for b in bases]
    params: dict[str, float] = {"max_wait_rounds": int(DWISE_YAML["max_wait_rounds"]),
                                "prior_rounds": float(DWISE_YAML["prior_rounds"])}
    done: dict[tuple[float, float], list[dict[str, Any]]] = {}
    met: dict[str, bool] = {}
    for key, values in (("max_wait_rounds", WAIT_SWEEP), ("prior_rounds", PRIOR_SWEEP)):
        scores = {}
        for v in values:
            trial = {**params, key: v}
            tag = (trial["max_wait_rounds"], trial["prior_rounds"])
            if tag not in done:  # NOTE: the second coordinate revisits the first's choice
                done[tag] = [run(row_overrides(b, "dwise", trial, None)) for b in bases]
                progress(f"tuning {trial}: mean E2E vs stock " + ", ".join(
                    f"{e2e(d, 'mean') / e2e(s, 'mean'):.2f}" for d, s in zip(done[tag], stock, strict=True)))
            scores[v] = list(zip(done[tag], stock, strict=True))
        params[key], met[key] = choose(scores)
    sweep = [{"params": {"max_wait_rounds": w, "prior_rounds": p}, "runs": r, "stock": stock}
             for (w, p), r in done.items()]
    return params, sweep, met


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_output_args(ap, "dwise", "dwise")
    args = ap.parse_args()
    commit, t0 = git_commit(), time.perf_counter()

    def progress(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:5.0f} s] {msg}", flush=True)

    params, sweep, met = tune(progress)
    progress(f"chosen on the tuning split: {params}")
    table: list[dict[str, Any]] = []
    for w in WORKLOADS:
        for rho in LOADS:
            scale = time_scale(w, w.report, rho)
            base = window_overrides(w, w.report, scale)
            cell: dict[str, Any] = {"workload": w.name, "rho": rho, "scale": scale, "cap": None,
                    **{row: run(row_overrides(base, row, params, None)) for row in ("stock", "dwise", "oracle")}}
            # NOTE: stock and the oracle never read max_new_tokens (the cap is above every shaped
            # output): the client-cap cell shares their runs and reruns DWISE only
            capped: dict[str, Any] = {**cell, "cap": CLIENT_CAP, "dwise": run(row_overrides(base, "dwise", params, CLIENT_CAP))}
            table += [cell, capped]
            for c in (cell, capped):
                progress(f"{w.name} rho {rho} cap {c['cap']}: mean E2E stock {e2e(c['stock'], 'mean'):.1f} s, "
                         f"DWISE {e2e(c['dwise'], 'mean'):.1f} s, oracle {e2e(c['oracle'], 'mean'):.1f} s")
    for w in WORKLOADS:
        scale = time_scale(w, w.report, GPU_LOAD, gpu=True)
        base = window_overrides(w, w.report, scale, gpu=True)
        cell = {"workload": w.name, "rho": GPU_LOAD, "scale": scale, "cap": None, "gpu": True,
                **{row: run(row_overrides(base, row, params, None)) for row in ("stock", "dwise", "oracle")}}
        table.append(cell)
        progress(f"{w.name} GPU-ish rho {GPU_LOAD}: mean E2E stock {e2e(cell['stock'], 'mean'):.1f} s, "
                 f"DWISE {e2e(cell['dwise'], 'mean'):.1f} s, oracle {e2e(cell['oracle'], 'mean'):.1f} s")
    wall = time.perf_counter() - t0
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "runs.json").write_text(json.dumps({"params": params, "met": met, "table": table, "sweep": sweep},
                                                       indent=1, default=str))
    previous = args.out.read_text() if args.out.exists() else ""
    args.out.write_text(render(table, sweep, params, met, commit, wall, previous))
    print(f"wrote {args.out} ({wall / 60:.1f} min)")
    if params != {"max_wait_rounds": DWISE_YAML["max_wait_rounds"], "prior_rounds": DWISE_YAML["prior_rounds"]}:
        print(f"NOTE: conf/policy/dwise.yaml holds max_wait_rounds={DWISE_YAML['max_wait_rounds']}, "
              f"prior_rounds={DWISE_YAML['prior_rounds']}; the tuning split chose {params}")


def _pct(a: float, b: float) -> str:
    return f"{100 * (a / b - 1):+.0f} %"


def _blocks(run_: dict[str, Any]) -> str:
    return f"{run_['blocks_per_round']:.2f}"


def _table(cells: list[dict[str, Any]]) -> list[str]:
    lines = ["| workload | load | stock mean / p99 | DWISE mean / p99 | oracle mean / p99 | DWISE vs stock "
             "(mean, p99) | oracle vs stock (mean, p99) | TTFT-like p50: stock / DWISE / oracle "
             "| blocks per round: stock / DWISE / oracle |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        s, d, o = c["stock"], c["dwise"], c["oracle"]
        lines.append(
            f"| {c['workload']} | {c['rho']:.2f} (x{c['scale']:g}) | {fmt(e2e(s, 'mean'))} / {fmt(e2e(s, 'p99'))} s "
            f"| {fmt(e2e(d, 'mean'))} / {fmt(e2e(d, 'p99'))} s | {fmt(e2e(o, 'mean'))} / {fmt(e2e(o, 'p99'))} s "
            f"| {_pct(e2e(d, 'mean'), e2e(s, 'mean'))}, {_pct(e2e(d, 'p99'), e2e(s, 'p99'))} "
            f"| {_pct(e2e(o, 'mean'), e2e(s, 'mean'))}, {_pct(e2e(o, 'p99'), e2e(s, 'p99'))} "
            f"| {' / '.join(fmt(x['summary']['ttft_s']['p50']) for x in (s, d, o))} s "
            f"| {' / '.join(_blocks(x) for x in (s, d, o))} |")
    return lines


def keep(previous: str, name: str, placeholder: str) -> str:
    """The section ``name`` between its markers: as the previous table had it once filled in (by
    whoever ran the live server), else ``placeholder``. NOTE: rerunning the script keeps live results."""
    begin, end = f"<!-- {name}:begin (kept by bench.scripts.dwise once filled) -->", f"<!-- {name}:end -->"
    found = re.search(re.escape(begin) + r"\n(.*?)\n" + re.escape(end), previous, flags=re.S)
    body = found.group(1) if found and "PLACEHOLDER" not in found.group(1) else placeholder
    return f"{begin}\n{body}\n{end}"


def render(table: list[dict[str, Any]], sweep: list[dict[str, Any]], params: dict[str, float],
           met: dict[str, bool], commit: str, wall_s: float, previous: str = "") -> str:
    main_cells = [c for c in table if c["cap"] is None and not c.get("gpu")]
    cap_cells = [c for c in table if c["cap"] is not None]
    gpu_cells = [c for c in table if c.get("gpu")]
    n = {c["workload"]: c["stock"]["summary"]["requests"] for c in main_cells}
    lines = [
        "# DWISE in the dLLM simulator", "",
        f"Produced by `python -m bench.scripts.dwise` at commit {commit} ({datetime.now(UTC):%Y-%m-%d}, "
        f"{wall_s / 60:.0f} min on one core). The dLLM simulator (`bench/sim/dllm`, docs/dwise.md): SGLang "
        "0.5.23's diffusion-LM rounds (FDFO), block size 4; every generation block with k masks takes k + 1 "
        "rounds (measured on the tiny random SDAR, docs/dwise-notes.md §3.1); a round costs 30 ms per block "
        "(the CPU tiny model, §3.2), so throughput is the same under every order. No prefix cache, no EOS "
        "before the trace's length, no prompt text, no hidden states.", "",
        "Workloads: the traces' real prompt and output lengths shaped as the project shapes them for the CPU "
        "server (prompts x1/16 for Azure, x1/32 for Mooncake, outputs x1/8, capped at 1,024 / 128 tokens), so "
        "the same requests fit the tiny SDAR (context 2,048). Reported windows (second half hour): "
        + ", ".join(f"{w.name} [{w.report[0]}, {w.report[1]}) s ({n[w.name]} requests)" for w in WORKLOADS)
        + ". Load: offered block work / device throughput, set by `trace.time_scale` (in brackets).", "",
        f"Rows at equal round capacity ({ROUND_BLOCKS} blocks per round): **stock** = SGLang's own dLLM "
        f"scheduling with `sim.max_running_requests={ROUND_BLOCKS}` (FCFS into the slots, no preemption, "
        f"prompt blocks first); **DWISE** = `+policy=dwise` ({SLOTS} slots, {ROUND_BLOCKS} blocks per round, "
        f"max_wait_rounds={params['max_wait_rounds']:g}, prior_rounds={params['prior_rounds']:g}, chosen on the "
        "tuning split, below); **oracle** = the same order and aging with the true remaining rounds "
        "(`sim.dllm.oracle=true`, bench-only). E2E = last block's end - arrival; TTFT-like = the first "
        "generation block's end - arrival.", "",
        "## End-to-end latency, max_new_tokens = the true output (replay semantics)", "",
        "As the project's replays send requests (`ignore_eos`, `max_new_tokens` = the trace's length): the host "
        "knows each request's block count, which caps DWISE's estimate (`denoise_rounds_bound`).", "",
        *_table(main_cells), "",
        f"## End-to-end latency, max_new_tokens = {CLIENT_CAP} for every request (simulator only)", "",
        f"A client cap instead (`sim.dllm.max_new_tokens={CLIENT_CAP}`): outputs still end at their trace "
        "length (as at EOS), so the host's bound says nothing per request and DWISE ranks by its regression "
        "alone. Stock and the oracle do not read the cap: their runs are the ones above. The tiny random "
        "model never emits EOS, so no live run can replay this variant.", "",
        *_table(cap_cells), "",
        f"## GPU-ish round cost (an assumption), load {GPU_LOAD}, replay semantics", "",
        "`sim.dllm.round_cost=roofline`: `bench/sim/cost.py`'s roofline for one forward over the round's blocks "
        "on an H100 with Llama-3.1-8B (standing in for SDAR-8B, a Qwen3-8B-shaped model): about 9 ms per round "
        "whatever its block count up to ~100 blocks, so a round that runs fewer blocks than its capacity wastes "
        "the rest (stock's prefill-only rounds do). Not measured on any dLLM; load = block work over full "
        f"rounds of {ROUND_BLOCKS} blocks ({GPU_CONTEXT}-token contexts).", "",
        *_table(gpu_cells), "",
        "## Estimator rank quality (Spearman vs true denoising rounds, reported DWISE runs)", "",
        "At arrival: DWISE's arrival regression (online RLS on the prompt's token count; words and lines are 0 "
        "without text), read when the request is first ranked, over finished requests. Capped: the same "
        "clipped to the host's bound, what DWISE actually ranks by.", "",
        "| workload | load | requests | at arrival (regression) | at arrival, capped (replay semantics) "
        f"| at arrival, capped (cap {CLIENT_CAP}) |", "|---|---|---|---|---|---|"]
    for c, k in zip(main_cells, cap_cells, strict=True):
        sp, spk = c["dwise"]["spearman"], k["dwise"]["spearman"]
        lines.append(f"| {c['workload']} | {c['rho']:.2f} | {sp['requests']:.0f} | {sp['regression']:.3f} "
                     f"| {sp['capped']:.3f} | {spk['capped']:.3f} |")
    lines += [
        "", keep(previous, "refiner", (
            "### After round one (refiner): TO BE FILLED FROM THE LIVE SERVER\n\n"
            "> PLACEHOLDER. The re-estimate after the first denoising round needs the final-layer hidden "
            "states, which the simulator does not have (`RequestView.features` stays None there). Spearman of "
            "the refiner's estimate vs true denoising rounds, measured on the live server, goes here.")), "",
        keep(previous, "live", (
            "## Live CPU replay: TO BE FILLED\n\n"
            "> PLACEHOLDER for the live CPU replay of one workload on the tiny SDAR (`model=sdar_tiny`), stock "
            "vs DWISE, beside its simulated rows above. A row's live replay is its command below with "
            "`live.endpoint=URL live.api=generate` and without the simulator-only overrides (`sim.*`, "
            "`+policy`, `policy.*`); the server then schedules: start it with `+policy=dwise` (and the chosen "
            f"`policy.*`) or with `sglang.max_running_requests={ROUND_BLOCKS}` for stock.")), "",
        "## Tuning split (chosen values in bold)", "",
        "Tuning windows (first half hour): " + ", ".join(f"{w.name} [{w.tuning[0]}, {w.tuning[1]}) s"
                                                          for w in WORKLOADS)
        + f", at loads {', '.join(f'{r:g}' for r in TUNE_LOADS)}. Cells: DWISE's mean E2E / stock's, and its "
        f"p99 / stock's. Rule: lowest mean ratio among settings with every p99 ratio <= {P99_SLACK}; else the "
        "lowest worst p99 ratio. " + " ".join(
            f"`{k}`: {'the rule was met' if ok else 'no setting met the p99 rule, the fallback chose'}."
            for k, ok in met.items()), "",
        "| max_wait_rounds | prior_rounds | " + " | ".join(
            f"{w.name} {r:g}" for w in WORKLOADS for r in TUNE_LOADS) + " |",
        "|---|---|" + "---|" * (len(WORKLOADS) * len(TUNE_LOADS))]
    for entry in sweep:
        p = entry["params"]
        chosen = p == params
        cells = [f"{e2e(d, 'mean') / e2e(s, 'mean'):.2f}, {e2e(d, 'p99') / e2e(s, 'p99'):.2f}"
                 for d, s in zip(entry["runs"], entry["stock"], strict=True)]
        wait, prior = f"{p['max_wait_rounds']:g}", f"{p['prior_rounds']:g}"
        lines.append(f"| {f'**{wait}**' if chosen else wait} | {f'**{prior}**' if chosen else prior} | "
                     + " | ".join(cells) + " |")
    lines += ["", "## Commands (reported rows)", "", "```"]
    for c in table:
        lines += [c[row]["cmd"] for row in (("stock", "dwise", "oracle") if c["cap"] is None else ("dwise",))]
    lines += ["```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
