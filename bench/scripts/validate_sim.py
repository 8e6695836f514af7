"""Validate the simulator against the CPU server on the same shaped traces.

    python -m bench.scripts.validate_sim                      # ~15 min; writes bench/results/validation.md
    python -m bench.scripts.validate_sim --calibration results/calibration/<run>/cpu.json
    python -m bench.scripts.validate_sim --quick --out /tmp/validation.md   # ~30 requests per case

Each case is one ``python -m bench`` configuration (a window of a real trace,
shaped for SmolLM2-135M and time-scaled so that the CPU server is loaded but
stable), run twice on the identical request list: live against a fresh CPU
server (``python -m server model.dtype=float32``, started per case) and in the
simulator with ``accelerator=cpu model_profile=smollm2-135m`` (plus the fitted
constants of ``--calibration``, when given, as ``accelerator.*`` overrides).
It reports the simulator's error on mean and p90 TTFT, output throughput
(tokens/s over the measured span), mean TPOT and mean E2E latency; the
target is 15% on each. Below each case's table, SGLang's own step counters
(``bench.counters``: prefill busy time, decode steps and how a step's time
grows with the batch) are set against the simulator's rebuilt from its
iteration log, which says whether an error comes from prefill or decode.
Every run's
results folder goes under ``--results`` (git-ignored); only the table is
meant to be committed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.config import compose_bench, resolve_bench
from bench.live.server import ServerProcess
from bench.report import fmt
from bench.run import run_bench
from bench.scripts.common import add_output_args, git_commit

TARGET = 0.15
SERVER_OVERRIDES = ("model.dtype=float32",)
COMMON = ("accelerator=cpu", "model_profile=smollm2-135m", "live.api=generate")


@dataclass(frozen=True)
class Case:
    """One validation workload: its bench overrides (shared by both runs)."""

    name: str
    overrides: tuple[str, ...]
    why: str
    quick_window_s: float
    """Window length of ``--quick`` (about 30 requests)."""


#: Chosen for load (NOTE: never to hide an error; the scales were set from
#: simulated load before the full comparison ran). Azure conversation turns at
#: ~1.25 req/s (prompts /16: ~72 tokens, outputs /8: ~26): the server is busy
#: most of the time and TTFT p90 is several times the unloaded TTFT. Mooncake
#: conversations (prompts /32 in 16-token blocks: ~350 tokens, outputs /8: ~43):
#: the trace's timestamps come in 3 s steps, so ~10 requests arrive at once
#: every 30 s at a 10x time scale; each burst queues for several seconds of
#: prefill and drains before the next (stable: TTFT no longer grows at 15x or 20x).
CASES = (
    Case("azure_conversation", (
        "trace=azure_conversation", "trace.window_start_s=600", "trace.window_end_s=660",
        "trace.time_scale=4", "live.input_scale=0.0625", "live.output_scale=0.125",
        "live.max_input_tokens=1024", "live.max_output_tokens=128"),
        "Azure LLM conversation trace, 60 s window from 600 s, 4x slower; no prefix "
        "information (nothing is shared)", 6.0),
    Case("mooncake_conversation", (
        "trace=mooncake_conversation", "trace.window_start_s=600", "trace.window_end_s=630",
        "trace.time_scale=10", "live.input_scale=0.03125", "live.output_scale=0.125",
        "live.max_input_tokens=2048", "live.max_output_tokens=128"),
        "Mooncake conversation trace, 30 s window from 600 s, 10x slower (bursts of ~10 "
        "requests every 30 s); prefix sharing in 16-token blocks", 6.0),
)
#: (label, summary key, sub-key): the compared metrics; the first ``TARGETED`` are the target's.
METRICS = (
    ("TTFT mean", "ttft_s", "mean"), ("TTFT p90", "ttft_s", "p90"),
    ("output throughput", "throughput_output_tps", None),
    ("TPOT mean", "tpot_s", "mean"), ("E2E mean", "e2e_s", "mean"),
    ("TTFT p50", "ttft_s", "p50"),
    ("prefix hit rate", "prefix_hit_rate", None), ("queue length (mean)", "queue_len", "mean"),
)
TARGETED = 5


def value(summary: dict[str, Any], key: str, sub: str | None) -> float | None:
    v = summary.get(key)
    return (v or {}).get(sub) if sub is not None else v


def rel_error(sim: float | None, live: float | None) -> float | None:
    """Simulator error relative to the live measurement."""
    if sim is None or live is None or live == 0:
        return None
    return sim / live - 1


def case_overrides(case: Case, quick: bool) -> list[str]:
    """The bench overrides of ``case`` (``--quick``: its window cut short)."""
    out = [*COMMON, *case.overrides, "output.progress=false"]
    if quick:
        start = next(float(o.split("=")[1]) for o in out if o.startswith("trace.window_start_s="))
        out = [o for o in out if not o.startswith("trace.window_end_s=")]
        out.append(f"trace.window_end_s={start + case.quick_window_s:g}")
    return out


def run_case(case: Case, overrides: list[str], sim_extra: list[str], results: Path) -> dict[str, Any]:
    """Both runs of one case; their summaries and the exact command lines."""
    results.mkdir(parents=True, exist_ok=True)
    with ServerProcess(list(SERVER_OVERRIDES), results / "server.log") as server:
        live_args = [*overrides, f"live.endpoint={server.base_url}"]
        live = run_bench(resolve_bench(compose_bench(live_args)), results / "live")
    sim_args = [*overrides, *sim_extra]
    sim = run_bench(resolve_bench(compose_bench(sim_args)), results / "sim")
    if live["summary"]["requests"] != sim["summary"]["requests"]:
        raise AssertionError(f"{case.name}: live and simulated request lists differ")
    return {"live": live, "sim": sim, "live_args": live_args, "sim_args": sim_args}


def render(rows: list[tuple[Case, dict[str, Any]]], sim_extra: list[str], calibration: Path | None,
           quick: bool) -> str:
    lines = [
        "# Simulator validation against the CPU server",
        "",
        f"Produced by `python -m bench.scripts.validate_sim{' --quick' if quick else ''}"
        f"{f' --calibration {calibration}' if calibration else ''}` at commit {git_commit()} "
        f"({datetime.now(UTC):%Y-%m-%d}) on {_machine()}.",
        "",
        "Each case replays one shaped trace window twice, on the identical request list "
        "(same scaled lengths, arrival times and prefix blocks): live against a fresh CPU "
        f"server (`python -m server {' '.join(SERVER_OVERRIDES)}`, SGLang's own `bench_serving` "
        "client, token-id prompts over `/generate`) and in the simulator "
        "(`accelerator=cpu model_profile=smollm2-135m`"
        + (f" with the calibrated overrides `{' '.join(sim_extra)}`" if sim_extra else
           ", constants as in `conf/accelerator/cpu.yaml`") + "). Error = simulated / live - 1; "
        f"target: |error| <= {TARGET:.0%} on mean and p90 TTFT, output throughput "
        "(output tokens per second over the measured span), mean TPOT and mean E2E latency.",
        "",
    ]
    verdicts = []
    for case, r in rows:
        live, sim = r["live"]["summary"], r["sim"]["summary"]
        shape = r["live"]["meta"]["shape"]
        lines += [f"## {case.name}", "",
                  f"{case.why}: {live['requests']} requests over {live['span_s']:.0f} s "
                  f"({shape['dropped_too_long']} dropped as too long), "
                  f"{live['finished']} finished live, {sim['finished']} simulated. Live client lag: "
                  f"mean {r['live']['meta']['live']['client_lag_s']['mean'] * 1e3:.1f} ms.", "",
                  "| metric | live | simulated | error |", "|---|---|---|---|"]
        for i, (label, key, sub) in enumerate(METRICS):
            lv, sv = value(live, key, sub), value(sim, key, sub)
            err = rel_error(sv, lv)
            scale, unit = (1e3, "ms") if key.endswith("_s") else (100, "%") if key == "prefix_hit_rate" else (1, "")
            mark = ""
            if i < TARGETED:
                ok = err is not None and abs(err) <= TARGET
                verdicts.append((case.name, label, err, ok))
                mark = " ✓" if ok else " ✗"
            lines.append(f"| {label} | {fmt(lv, scale, unit)} | {fmt(sv, scale, unit)} "
                         f"| {'-' if err is None else f'{err:+.1%}'}{mark} |")
        lines += counter_lines(r["live"]["meta"]["live"].get("engine_counters"),
                               r["sim"]["meta"].get("engine_counters"))
        lines += ["", "Commands (from the repository root; the live one needs "
                  f"`python -m server {' '.join(SERVER_OVERRIDES)}` running, here on its own port):",
                  "", "```", "python -m bench " + " ".join(r["live_args"]),
                  "python -m bench " + " ".join(r["sim_args"]), "```", ""]
    missed = [v for v in verdicts if not v[3]]
    lines += ["## Verdict", ""]
    if missed:
        lines.append("Target missed on: " + "; ".join(
            f"{c} {label} ({'n/a' if e is None else f'{e:+.1%}'})" for c, label, e, _ in missed) + ".")
    else:
        lines.append(f"All targeted errors within {TARGET:.0%}.")
    return "\n".join(lines) + "\n"


def counter_lines(live: dict[str, float] | None, sim: dict[str, float] | None) -> list[str]:
    """SGLang's step counters, live against simulated (module docs)."""
    if live is None or sim is None:
        return ["", "SGLang's step counters: not available "
                f"({'the server published none' if live is None else 'the simulation kept no iteration log'})."]
    rows = (("prefill busy (s)", "prefill_busy_s", 1, ".1f"), ("prefill tokens", "prefill_tokens", 1, ",.0f"),
            ("decode steps (consecutive)", "decode_steps", 1, ",.0f"), ("mean batch", "mean_batch", 1, ".2f"),
            ("mean decode step (ms)", "mean_step_s", 1e3, ".1f"),
            ("decode step per request in the batch (ms)", "slope_s", 1e3, ".2f"),
            ("decode step at batch 0 (ms, fitted)", "intercept_s", 1e3, ".1f"))
    lines = ["", "SGLang's own step counters over the replay (`/v1/loads`), and the simulator's "
             "rebuilt with the same accounting:", "", "| counter | live | simulated | error |", "|---|---|---|---|"]
    for label, key, scale, spec in rows:
        lv, sv = live[key], sim[key]
        err = rel_error(sv, lv)
        lines.append(f"| {label} | {lv * scale:{spec}} | {sv * scale:{spec}} | "
                     f"{'-' if err is None or err != err else f'{err:+.1%}'} |")
    return lines


def _machine() -> str:
    """``<CPU model>, <n> cores``."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")),
                 platform.processor() or "unknown CPU")
    return f"{model}, {os.cpu_count()} cores"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short windows (development only)")
    ap.add_argument("--calibration", type=Path, help="cpu.json of bench.scripts.calibrate_cpu")
    ap.add_argument("--cases", nargs="+", choices=[c.name for c in CASES], default=[c.name for c in CASES])
    add_output_args(ap, "validation", "validation")
    args = ap.parse_args()
    git_commit()  # NOTE: stamps the run now (cached), before any work
    sim_extra = json.loads(args.calibration.read_text())["overrides"] if args.calibration else []
    rows = []
    for case in (c for c in CASES if c.name in args.cases):
        r = run_case(case, case_overrides(case, args.quick), sim_extra, args.results / case.name)
        rows.append((case, r))
        for label, key, sub in METRICS[:TARGETED]:
            lv, sv = value(r["live"]["summary"], key, sub), value(r["sim"]["summary"], key, sub)
            err = rel_error(sv, lv)
            print(f"{case.name}: {label}: live {lv}, sim {sv}, error "
                  f"{'n/a' if err is None else f'{err:+.1%}'}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(rows, sim_extra, args.calibration, args.quick))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
