"""DWISE vs SGLang's stock dLLM scheduling on the live CPU server, beside the simulator
-> the live section of ``bench/results/dwise.md``.

    python -m bench.scripts.dwise_live [--seconds 15] [--load 0.7]

A window of dwise.md's first reported workload (Azure conversation, from the
start of its reported window, shaped for the tiny SDAR, time-scaled to
``--load`` as ``bench.scripts.dwise`` scales it) is replayed live, token-id
prompts over ``/generate`` with each request's trace length as
``max_new_tokens`` (``ignore_eos``), against a fresh ``model=sdar_tiny`` server
per row: **stock** (``sglang.max_running_requests`` = DWISE's round blocks:
the same round capacity), **DWISE** (``+policy=dwise`` as configured) and
**DWISE, no cap** (its estimators alone, ``policy.cap_by_max_new_tokens=false``). The
same request list is simulated with the same overrides.

NOTE: the random-weight model never stops before ``max_new_tokens``, so each
request's ``max_new_tokens`` is its true length and DWISE's cap by it is exact
here: the live DWISE row is an upper bound on what its estimators earn.
"""

from __future__ import annotations

import argparse
import re
import time
from typing import Any

from bench.config import compose_bench, resolve_bench
from bench.live.server import ServerProcess
from bench.run import run_bench
from bench.scripts.common import add_output_args, git_commit
from bench.scripts.dwise import DWISE_YAML, ROUND_BLOCKS, WORKLOADS, row_overrides, run, time_scale, window_overrides

NO_CAP = "policy.cap_by_max_new_tokens=false"
# row -> (the server's overrides, the simulated twin's extra overrides)
ROWS = {
    "stock": (["model=sdar_tiny", f"sglang.max_running_requests={ROUND_BLOCKS}", "sglang.sleep_on_idle=true"], []),
    "DWISE": (["model=sdar_tiny", "+policy=dwise", "sglang.sleep_on_idle=true"], []),
    "DWISE, no cap": (["model=sdar_tiny", "+policy=dwise", NO_CAP, "sglang.sleep_on_idle=true"], [NO_CAP]),
}
BEGIN, END = "<!-- live:begin (kept by bench.scripts.dwise once filled) -->", "<!-- live:end -->"


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
    scale = time_scale(w, window, args.load)
    base = window_overrides(w, window, scale)
    live_base = [o for o in base if not o.startswith("sim.")] + ["live.api=generate"]
    params = {"max_wait_rounds": float(DWISE_YAML["max_wait_rounds"]), "prior_rounds": float(DWISE_YAML["prior_rounds"])}
    out: dict[str, dict[str, Any]] = {}
    for row, (server_args, sim_extra) in ROWS.items():
        folder = args.results / re.sub(r"\W+", "_", row).strip("_").lower()
        folder.mkdir(parents=True, exist_ok=True)
        with ServerProcess(server_args, folder / "server.log") as server:
            live = run_bench(resolve_bench(compose_bench([*live_base, f"live.endpoint={server.base_url}"])),
                             folder / "live")
        sim = run(row_overrides(base, "stock" if row == "stock" else "dwise", params, None) + sim_extra)
        if live["summary"]["requests"] != sim["summary"]["requests"]:
            raise AssertionError(f"{row}: live and simulated request lists differ")
        out[row] = {"live": live["summary"], "sim": sim["summary"], "server": server_args}
        print(f"[{time.perf_counter() - t0:5.0f} s] {row}: live mean E2E {e2e(live['summary'], 'mean'):.2f} s, "
              f"simulated {e2e(sim['summary'], 'mean'):.2f} s", flush=True)
    body = render(out, base, args, commit, time.perf_counter() - t0)
    text = args.out.read_text()
    text = re.sub(re.escape(BEGIN) + r"\n.*?\n" + re.escape(END), lambda _: f"{BEGIN}\n{body}\n{END}", text,
                  flags=re.S)
    args.out.write_text(text)
    print(body)


def render(out: dict[str, dict[str, Any]], base: list[str], args: argparse.Namespace, commit: str,
           wall_s: float) -> str:
    n = out["stock"]["live"]["requests"]
    lines = [
        "## Live CPU replay (Azure conversation window, tiny SDAR)", "",
        f"Produced by `python -m bench.scripts.dwise_live --seconds {args.seconds} --load {args.load:g}` at commit "
        f"{commit} ({wall_s / 60:.0f} min): the first {args.seconds} s of the reported Azure window ({n} requests), "
        f"replayed live on the CPU server (`python -m server {' '.join(out['stock']['server'])}` for stock, "
        f"`python -m server {' '.join(out['DWISE']['server'])}` for DWISE; token-id prompts over `/generate`, "
        "`max_new_tokens` = each request's trace length, `ignore_eos`), and simulated on the same request list: "
        f"`python -m bench {' '.join(o for o in base if o != 'output.progress=false')}` (+ the row's overrides "
        "as in the table above). The random model never stops early, so `max_new_tokens` is each request's true "
        "length and DWISE's cap by it is exact: the live DWISE row is an upper bound on its estimators' worth. "
        f"**DWISE, no cap** (`{NO_CAP}`) ranks by its estimators alone: the arrival regression (learned online "
        "from this run's finished requests, words and lines from the prompt text live; the simulator has tokens "
        "only), as a client that sets no useful `max_tokens` would see it.", "",
        "| row | live mean / p99 E2E | simulated mean / p99 E2E | live TTFT p50 |",
        "|---|---|---|---|",
    ]
    for row, r in out.items():
        lines.append(f"| {row} | {e2e(r['live'], 'mean'):.2f} / {e2e(r['live'], 'p99'):.2f} s | "
                     f"{e2e(r['sim'], 'mean'):.2f} / {e2e(r['sim'], 'p99'):.2f} s | "
                     f"{float(r['live']['ttft_s']['p50']):.2f} s |")
    d, s = out["DWISE"], out["stock"]
    lines += ["", f"Live, DWISE vs stock: mean {e2e(d['live'], 'mean') / e2e(s['live'], 'mean') - 1:+.0%}, "
              f"p99 {e2e(d['live'], 'p99') / e2e(s['live'], 'p99') - 1:+.0%}; simulated: mean "
              f"{e2e(d['sim'], 'mean') / e2e(s['sim'], 'mean') - 1:+.0%}, "
              f"p99 {e2e(d['sim'], 'p99') / e2e(s['sim'], 'p99') - 1:+.0%}."]
    n = out["DWISE, no cap"]
    lines += [f"Live, DWISE without the cap vs stock: mean {e2e(n['live'], 'mean') / e2e(s['live'], 'mean') - 1:+.0%}, "
              f"p99 {e2e(n['live'], 'p99') / e2e(s['live'], 'p99') - 1:+.0%}; simulated: mean "
              f"{e2e(n['sim'], 'mean') / e2e(s['sim'], 'mean') - 1:+.0%}, "
              f"p99 {e2e(n['sim'], 'p99') / e2e(s['sim'], 'p99') - 1:+.0%}."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
