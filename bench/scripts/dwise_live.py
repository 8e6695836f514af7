"""DWISE vs SGLang's stock dLLM scheduling on the live CPU server, beside the simulator
-> the live section of ``bench/results/dwise.md``.

    python -m bench.scripts.dwise_live [--seconds 15] [--load 0.7]

A window of dwise.md's first reported workload (Azure conversation, from the
start of its reported window, shaped for the tiny SDAR, time-scaled to
``--load`` as ``bench.scripts.dwise`` scales it) is replayed live, token-id
prompts over ``/generate`` with each request's trace length as
``max_new_tokens`` (``ignore_eos``), against a fresh ``model=sdar_tiny`` server
per row: **stock, best** (``sglang.max_running_requests`` = the slot count
dwise.md's tuning split chose for stock, ``BEST_STOCK_SLOTS``), **stock, equal
capacity** (``max_running_requests`` = DWISE's round blocks: the same compute
per round), **DWISE** (``+policy=dwise`` as configured) and **DWISE, no cap**
(its estimators alone, ``policy.cap_by_max_new_tokens=false``). The same
request list is simulated with the same overrides.

The load is the live server's: before the replay, the stock server's round
time is measured (``measure_round_cost``: bursts of 1 … ``LOAD_BLOCKS``
equal requests whose round count is known, wall time / rounds, a line fitted
through the four) and both the time scale (``--load`` of the full-round block
throughput) and the simulated twins' ``cpu_tiny`` cost use that fit (the
simulator's default, ``bench.schema.CPU_TINY_*``, is this probe's result on a
quiet machine; the fit here follows the machine the replay runs on).

NOTE: the random-weight model never stops before ``max_new_tokens``, so each
request's ``max_new_tokens`` is its true length and DWISE's cap by it is exact
here: the live DWISE row is an upper bound on what its estimators earn.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import time
from typing import Any

import httpx
import numpy as np

from bench.config import compose_bench, resolve_bench
from bench.live.server import ServerProcess
from bench.run import run_bench
from bench.schema import CPU_TINY_BASE_S, CPU_TINY_BLOCK_S
from bench.scripts.common import add_output_args, git_commit
from bench.scripts.dwise_setup import (
    BEST_STOCK_SLOTS,
    CONFIGURED,
    LOAD_BLOCKS,
    WORKLOADS,
    load_block_s,
    row_overrides,
    run,
    time_scale,
    window_overrides,
)
from bench.sim.dllm import tiny_live_rounds

NO_CAP = "policy.cap_by_max_new_tokens=false"
SERVER = ("model=sdar_tiny", "sglang.sleep_on_idle=true")
EQUAL = int(CONFIGURED["round_blocks"])
# row -> (the server's overrides, the simulated twin's row and params, its extra overrides)
ROWS: dict[str, tuple[list[str], tuple[str, dict[str, float]], list[str]]] = {
    "stock, best": ([*SERVER, f"sglang.max_running_requests={BEST_STOCK_SLOTS}"],
                    ("stock", {"slots": BEST_STOCK_SLOTS}), []),
    "stock, equal capacity": ([*SERVER, f"sglang.max_running_requests={EQUAL}"], ("stock", {"slots": EQUAL}), []),
    # NOTE: the servers run DWISE as configured; its twins get the same values (CONFIGURED)
    "DWISE": ([*SERVER, "+policy=dwise"], ("dwise", CONFIGURED), []),
    "DWISE, no cap": ([*SERVER, "+policy=dwise", NO_CAP], ("dwise", CONFIGURED), [NO_CAP]),
}
BEGIN, END = "<!-- live:begin (kept by bench.scripts.dwise once filled) -->", "<!-- live:end -->"


#: The probe's requests: prompt and output tokens (16 generated blocks of 4: ~85 rounds each).
PROBE_PROMPT, PROBE_OUTPUT, PROBE_REPS, BLOCK_SIZE = 8, 64, 3, 4


def measure_round_cost(base_url: str, seed: int = 0) -> tuple[float, float, dict[int, float]]:
    """``(base_s, block_s, {blocks: median round s})`` of the stock server.

    ``k`` equal fresh requests in one ``/generate`` call run in lockstep (the
    first row's stock admits all ``k <= LOAD_BLOCKS``), so every round carries ``k`` blocks and
    the call takes their known round count times the round time (plus one HTTP
    round trip, under 2 % of ~85 rounds)."""
    rng = random.Random(seed)
    rounds = tiny_live_rounds(PROBE_PROMPT, PROBE_OUTPUT, BLOCK_SIZE)
    per_k: dict[int, float] = {}
    with httpx.Client(timeout=300) as http:
        for k in range(1, LOAD_BLOCKS + 1):
            times = []
            for _ in range(PROBE_REPS):
                ids = [[rng.randrange(1000, 40000) for _ in range(PROBE_PROMPT)] for _ in range(k)]
                t = time.perf_counter()
                r = http.post(base_url + "/generate", json={
                    "input_ids": ids, "sampling_params": {"max_new_tokens": PROBE_OUTPUT, "ignore_eos": True}})
                r.raise_for_status()
                times.append((time.perf_counter() - t) / rounds)
            per_k[k] = statistics.median(times)
    block_s, base_s = np.polyfit(list(per_k), list(per_k.values()), 1)
    return max(float(base_s), 0.0), float(block_s), per_k


def e2e(summary: dict[str, Any], key: str) -> float:
    return float(summary["e2e_s"][key])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=15, help="trace seconds replayed")
    ap.add_argument("--load", type=float, default=0.7)
    add_output_args(ap, "dwise", "dwise_live")
    args = ap.parse_args()
    commit, t0 = git_commit(), time.perf_counter()
    w = WORKLOADS[0]
    window = (w.report[0], w.report[0] + args.seconds)
    out: dict[str, dict[str, Any]] = {}
    base: list[str] = []
    live_base: list[str] = []
    cost: dict[str, Any] = {}
    for row, (server_args, (twin, params), sim_extra) in ROWS.items():
        folder = args.results / re.sub(r"\W+", "_", row).strip("_").lower()
        folder.mkdir(parents=True, exist_ok=True)
        with ServerProcess(server_args, folder / "server.log") as server:
            if not base:  # NOTE: the first row is stock's: its server sets the replay's load and cost
                base_s, block_s, per_k = measure_round_cost(server.base_url)
                full_block_s = load_block_s(base_s, block_s)
                cost = {"base_s": base_s, "block_s": block_s, "per_k": per_k, "full_block_s": full_block_s}
                print(f"[{time.perf_counter() - t0:5.0f} s] round = {base_s * 1e3:.1f} ms + {block_s * 1e3:.1f} ms "
                      f"x blocks (measured {', '.join(f'{k}: {v * 1e3:.1f}' for k, v in per_k.items())} ms)",
                      flush=True)
                scale = time_scale(w, window, args.load, block_s=full_block_s)
                fit = (float(f"{base_s:.4g}"), float(f"{block_s:.4g}"))
                base = window_overrides(w, window, scale, cpu_cost=fit)
                live_base = [o for o in base if not o.startswith("sim.")] + ["live.api=generate"]
            live = run_bench(
                resolve_bench(compose_bench([*live_base, f"live.endpoint={server.base_url}"])), folder / "live"
            )
            # NOTE: the same probe after the replay: what a round costs on this row's host (policy included)
            rounds_s = measure_round_cost(server.base_url, seed=1)[2]
        sim = run(row_overrides(base, twin, params, None) + sim_extra)
        if live["summary"]["requests"] != sim["summary"]["requests"]:
            raise AssertionError(f"{row}: live and simulated request lists differ")
        out[row] = {"live": live["summary"], "sim": sim["summary"], "server": server_args, "rounds_s": rounds_s}
        print(
            f"[{time.perf_counter() - t0:5.0f} s] {row}: live mean E2E {e2e(live['summary'], 'mean'):.2f} s, "
            f"simulated {e2e(sim['summary'], 'mean'):.2f} s",
            flush=True,
        )
    (args.results / "dwise_live.json").write_text(json.dumps({"commit": commit, "cost": cost, "base": base,
                                                              "rows": out}, indent=1, default=str))
    body = render(out, base, cost, args, commit, time.perf_counter() - t0)
    text = args.out.read_text()
    text = re.sub(re.escape(BEGIN) + r"\n.*?\n" + re.escape(END), lambda _: f"{BEGIN}\n{body}\n{END}", text,
                  flags=re.S)
    args.out.write_text(text)
    print(body)


def render(out: dict[str, dict[str, Any]], base: list[str], cost: dict[str, Any], args: argparse.Namespace,
           commit: str, wall_s: float) -> str:
    n = out["stock, best"]["live"]["requests"]
    lines = [
        "## Live CPU replay (Azure conversation window, tiny SDAR)", "",
        f"Produced by `python -m bench.scripts.dwise_live --seconds {args.seconds} --load {args.load:g}` at commit "
        f"{commit} ({wall_s / 60:.0f} min): the first {args.seconds} s of the reported Azure window ({n} requests), "
        f"replayed live on the CPU server (`python -m server {' '.join(out['stock, best']['server'])}` for stock "
        "at the slot count the tuning split chose for it above, the same with "
        f"`sglang.max_running_requests={EQUAL}` at DWISE's round capacity, "
        f"`python -m server {' '.join(out['DWISE']['server'])}` for DWISE; token-id prompts over `/generate`, "
        "`max_new_tokens` = each request's trace length, `ignore_eos`), and simulated on the same request list: "
        f"`python -m bench {' '.join(o for o in base if o != 'output.progress=false')}` (+ the row's overrides "
        "as in the table above). "
        f"**Load and cost are the live server's:** its round time, measured first on the stock server (bursts of "
        f"1–{LOAD_BLOCKS} equal requests, wall time / known rounds: "
        f"{', '.join(f'{k} blocks {v * 1e3:.1f} ms' for k, v in cost['per_k'].items())}), fits "
        f"{cost['base_s'] * 1e3:.1f} ms + {cost['block_s'] * 1e3:.1f} ms per block; the time scale offers "
        f"{args.load:g} of the throughput in full {LOAD_BLOCKS}-block rounds, as above, and the simulated twins use the fit "
        f"(the table above uses the simulator's default, {CPU_TINY_BASE_S * 1e3:g} ms + "
        f"{CPU_TINY_BLOCK_S * 1e3:g} ms per block: this probe's result on a quiet machine). "
        "The random model never stops early, so `max_new_tokens` is each request's true "
        "length and DWISE's cap by it is exact: the live DWISE row is an upper bound on its estimators' worth. "
        f"**DWISE, no cap** (`{NO_CAP}`) ranks by its estimators alone: the arrival regression (learned online "
        "from this run's finished requests; live it also reads the words and lines of the decoded prompt, "
        "here synthetic token ids; the simulator has tokens only), as a client that sets no useful `max_tokens` would see it. "
        "The last column is the same probe run on each row's server after its replay: what one round costs "
        "there, the host's ordering included.", "",
        f"| row | live mean / p99 E2E | simulated mean / p99 E2E | live TTFT p50 | live round, 1 / {LOAD_BLOCKS} blocks |",
        "|---|---|---|---|---|",
    ]
    for row, r in out.items():
        lines.append(f"| {row} | {e2e(r['live'], 'mean'):.2f} / {e2e(r['live'], 'p99'):.2f} s | "
                     f"{e2e(r['sim'], 'mean'):.2f} / {e2e(r['sim'], 'p99'):.2f} s | "
                     f"{float(r['live']['ttft_s']['p50']):.2f} s | "
            f"{r['rounds_s'][1] * 1e3:.1f} / {r['rounds_s'][LOAD_BLOCKS] * 1e3:.1f} ms |")
    lines.append("")
    for a, b in (("DWISE", "stock, best"), ("DWISE", "stock, equal capacity"), ("DWISE, no cap", "stock, best")):
        x, y = out[a], out[b]
        lines.append(f"Live, {a} vs {b}: mean {e2e(x['live'], 'mean') / e2e(y['live'], 'mean') - 1:+.0%}, "
                     f"p99 {e2e(x['live'], 'p99') / e2e(y['live'], 'p99') - 1:+.0%}; simulated: mean "
                     f"{e2e(x['sim'], 'mean') / e2e(y['sim'], 'mean') - 1:+.0%}, "
                     f"p99 {e2e(x['sim'], 'p99') / e2e(y['sim'], 'p99') - 1:+.0%}.")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
