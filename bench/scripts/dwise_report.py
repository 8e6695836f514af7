"""``bench/results/dwise.md`` from ``bench.scripts.dwise``'s runs."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from bench.frontier import Metric, verdict_lines
from bench.report import fmt
from bench.schema import CPU_TINY_BASE_S, CPU_TINY_BLOCK_S
from bench.scripts.dwise_setup import (
    CLIENT_CAP,
    GPU_CONTEXT,
    GPU_LOAD,
    LOAD_BLOCKS,
    P99_SLACK,
    PARAMS,
    ROWS,
    STOCK_SLOTS_SWEEP,
    TIE,
    TUNE_LOADS,
    WORKLOADS,
    e2e,
)


def _pct(a: float, b: float) -> str:
    return f"{100 * (a / b - 1):+.0f} %"


def _blocks(run_: dict[str, Any]) -> str:
    return f"{run_['blocks_per_round']:.2f}"


def _table(cells: list[dict[str, Any]]) -> list[str]:
    lines = ["| workload | load | stock, best: mean / p99 | stock, equal capacity | DWISE | oracle "
             "| DWISE vs best stock (mean, p99) | DWISE vs equal-capacity stock | oracle vs best stock "
             "| TTFT-like p50: stock best / DWISE / oracle | blocks per round: stock best / equal / DWISE / oracle |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        s, q, d, o = c["stock"], c["stock_eq"], c["dwise"], c["oracle"]
        lines.append(
            f"| {c['workload']} | {c['rho']:.2f} (x{c['scale']:g}) "
            + "".join(f"| {fmt(e2e(x, 'mean'))} / {fmt(e2e(x, 'p99'))} s " for x in (s, q, d, o))
            + "".join(f"| {_pct(e2e(x, 'mean'), e2e(y, 'mean'))}, {_pct(e2e(x, 'p99'), e2e(y, 'p99'))} "
                      for x, y in ((d, s), (d, q), (o, s)))
            + f"| {' / '.join(fmt(x['summary']['ttft_s']['p50']) for x in (s, d, o))} s "
            f"| {' / '.join(_blocks(x) for x in (s, q, d, o))} |")
    return lines


#: The metric pair of DWISE's issue: mean and p99 E2E (values within ``TIE`` count as equal).
FRONTIER_METRICS = (Metric("mean", "E2E mean", tolerance=TIE), Metric("p99", "E2E p99", tolerance=TIE))
#: SGLang's own dLLM scheduling, as the table's two stock rows run it.
STOCK_ROWS = {"stock": "stock, best", "stock_eq": "stock, equal capacity"}


def frontier_lines(main_cells: list[dict[str, Any]], cap_cells: list[dict[str, Any]]) -> list[str]:
    """DWISE against both stock rows on mean and p99 E2E together, per reported scenario."""
    def scenario(c: dict[str, Any]) -> str:
        return f"{c['workload']} {c['rho']:.2f}" + ("" if c["cap"] is None else f", cap {c['cap']}")

    points = {scenario(c): {name: (e2e(c[row], "mean"), e2e(c[row], "p99"))
                            for row, name in (*STOCK_ROWS.items(), ("dwise", "dwise"))}
              for c in (*main_cells, *cap_cells)}
    return ["### Frontier verdict: mean and p99 E2E together", "",
            f"Per scenario (the rows above and the client-cap rows below; `bench/frontier.py`, values within "
            f"{TIE:.0%} count as equal), DWISE against SGLang's stock dLLM scheduling at the best slot count and "
            "at DWISE's round capacity.", "",
            *verdict_lines(points, "dwise", tuple(STOCK_ROWS.values()), FRONTIER_METRICS)]


def keep(previous: str, name: str, placeholder: str) -> str:
    """The section ``name`` between its markers: as the previous table had it once filled in (by
    whoever ran the live server), else ``placeholder``. NOTE: rerunning the script keeps live results."""
    begin, end = f"<!-- {name}:begin (kept by bench.scripts.dwise once filled) -->", f"<!-- {name}:end -->"
    found = re.search(re.escape(begin) + r"\n(.*?)\n" + re.escape(end), previous, flags=re.S)
    body = found.group(1) if found and "PLACEHOLDER" not in found.group(1) else placeholder
    return f"{begin}\n{body}\n{end}"


def render(table: list[dict[str, Any]], chosen: dict[str, Any], commit: str, wall_s: float,
           previous: str = "") -> str:
    params, met, sweep, best = chosen["params"], chosen["met"], chosen["sweep"], chosen["stock_slots"]
    main_cells = [c for c in table if c["cap"] is None and not c.get("gpu")]
    cap_cells = [c for c in table if c["cap"] is not None]
    gpu_cells = [c for c in table if c.get("gpu")]
    n = {c["workload"]: c["stock"]["summary"]["requests"] for c in main_cells}
    lines = [
        "# DWISE in the dLLM simulator", "",
        f"Produced by `python -m bench.scripts.dwise` at commit {commit} ({datetime.now(UTC):%Y-%m-%d}, "
        f"{wall_s / 60:.0f} min on one core). The dLLM simulator (`bench/sim/dllm`, docs/dwise.md): SGLang "
        "0.5.23's diffusion-LM rounds (FDFO), block size 4; every generation block with k masks takes k + 1 "
        "rounds (measured on the tiny random SDAR, docs/dwise-notes.md §3.1); a round costs "
        f"{CPU_TINY_BASE_S * 1e3:g} ms + {CPU_TINY_BLOCK_S * 1e3:g} ms per block (measured on the live CPU "
        "server by `bench.scripts.dwise_live`'s probe), so a round that runs fewer blocks than its capacity "
        "wastes part of its fixed cost. No prefix cache, no EOS before the trace's length, no prompt text, no "
        "hidden states.", "",
        "Workloads: the traces' real prompt and output lengths shaped as the project shapes them for the CPU "
        "server (prompts x1/16 for Azure, x1/32 for Mooncake, outputs x1/8, capped at 1,024 / 128 tokens), so "
        "the same requests fit the tiny SDAR (context 2,048). Reported windows (second half hour): "
        + ", ".join(f"{w.name} [{w.report[0]}, {w.report[1]}) s ({n[w.name]} requests)" for w in WORKLOADS)
        + f". Load: offered block work / the device's throughput in full rounds of {LOAD_BLOCKS} blocks, set by "
        "`trace.time_scale` (in brackets); bigger rounds run more blocks a second, so it is a scale, not a "
        "utilisation.", "",
        f"Rows: **stock, best** = SGLang's own dLLM scheduling (FCFS into the slots, no preemption, prompt "
        f"blocks first, every admitted request runs each round) at `sim.max_running_requests={best}`, the "
        f"slot count the tuning split chose from {', '.join(map(str, STOCK_SLOTS_SWEEP))} (below): the best of "
        "SGLang's built-ins, whose dLLM path has one order and the slot count as its knob; **stock, equal "
        f"capacity** = the same at `sim.max_running_requests={params['round_blocks']:g}`, DWISE's round "
        f"capacity; **DWISE** = `+policy=dwise` (slots={params['slots']:g}, "
        f"round_blocks={params['round_blocks']:g}, max_wait_rounds={params['max_wait_rounds']:g}, "
        f"prior_rounds={params['prior_rounds']:g}, chosen on the tuning split, below); **oracle** = the same "
        "order and aging with the true remaining rounds (`sim.dllm.oracle=true`, bench-only). E2E = last "
        "block's end - arrival; TTFT-like = the first generation block's end - arrival.", "",
        "## End-to-end latency, max_new_tokens = the true output (replay semantics)", "",
        "As the project's replays send requests (`ignore_eos`, `max_new_tokens` = the trace's length): the host "
        "knows each request's block count, which caps DWISE's estimate (`denoise_rounds_bound`).", "",
        *_table(main_cells), "",
        *frontier_lines(main_cells, cap_cells), "",
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
        f"rounds of {LOAD_BLOCKS} blocks ({GPU_CONTEXT}-token contexts). The rows keep the CPU tuning's "
        "choices (a GPU would favour far bigger rounds).", "",
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
            f"`policy.*`) or with `sglang.max_running_requests={best}` for stock.")), "",
        "## Tuning split (chosen values in bold)", "",
        "Tuning windows (first half hour): " + ", ".join(f"{w.name} [{w.tuning[0]}, {w.tuning[1]}) s"
                                                          for w in WORKLOADS)
        + f", at loads {', '.join(f'{r:g}' for r in TUNE_LOADS)}.", "",
        "Stock first: mean E2E per tuning scenario at each slot count; chosen: the lowest mean of their logs.", "",
        "| max_running_requests | " + " | ".join(f"{w.name} {r:g}" for w in WORKLOADS for r in TUNE_LOADS) + " |",
        "|---|" + "---|" * (len(WORKLOADS) * len(TUNE_LOADS))]
    for n, runs in chosen["stock_sweep"].items():
        tag = f"**{n}**" if int(n) == best else str(n)
        lines.append(f"| {tag} | " + " | ".join(f"{fmt(e2e(r, 'mean'))} s" for r in runs) + " |")
    lines += [
        "", f"Then DWISE against that stock. Cells: DWISE's mean E2E / stock's, and its p99 / stock's. Rule: lowest "
        f"mean ratio among settings with every p99 ratio <= {P99_SLACK} (within {TIE:.0%} of it: the sweep's "
        "first); else the lowest worst p99 ratio. " + " ".join(
            f"{k}: {'the rule was met' if ok else 'no setting met the p99 rule, the fallback chose'}."
            for k, ok in met.items()), "",
        "| slots | round_blocks | max_wait_rounds | prior_rounds | " + " | ".join(
            f"{w.name} {r:g}" for w in WORKLOADS for r in TUNE_LOADS) + " |",
        "|---|---|---|---|" + "---|" * (len(WORKLOADS) * len(TUNE_LOADS))]
    for entry in sweep:
        p = entry["params"]
        bold = "**" if all(float(p[k]) == float(params[k]) for k in PARAMS) else ""
        cells = [f"{e2e(d, 'mean') / e2e(s, 'mean'):.2f}, {e2e(d, 'p99') / e2e(s, 'p99'):.2f}"
                 for d, s in zip(entry["runs"], entry["stock"], strict=True)]
        lines.append("| " + " | ".join(f"{bold}{float(p[k]):g}{bold}" for k in PARAMS) + " | "
                     + " | ".join(cells) + " |")
    lines += ["", "## Commands (reported rows)", "", "```"]
    for c in table:
        lines += [c[row]["cmd"] for row in (ROWS if c["cap"] is None else ("dwise",))]
    lines += ["```", ""]
    return "\n".join(lines)
