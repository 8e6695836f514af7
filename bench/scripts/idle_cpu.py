"""What an idle CPU server costs, with SGLang's idle sleep off (its default) and on.

    python -m bench.scripts.idle_cpu                 # -> bench/results/idle_cpu.md
    python -m bench.scripts.idle_cpu --rounds 1 --out /tmp/idle.md   # a quick look

Server: ``python -m server`` on the default model, stock (no policy of ours), one
per row and round, with ``sglang.sleep_on_idle`` set explicitly (``false``:
SGLang's default; ``true``: the scheduler waits on its sockets while it has no
work, ``server.cpu_sglang``'s CPU default since this table).

Measured, per server, after it is ready and has served its first request:
- **idle CPU**: CPU seconds of every process of the server (supervisor, SGLang's
  HTTP process, scheduler, detokenizer) over ``IDLE_S`` seconds with no request,
  divided by ``IDLE_S`` (cores busy while nothing is asked);
- **wake-up latency**: ``REQUESTS`` one-token ``/generate`` requests, each sent
  after ``GAP_S`` seconds of idleness; median and max wall time. An idle sleep
  that is slow to wake would show here.

Rounds alternate the rows (off, on, off, on, ...) so drift hits both.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.live.server import ServerProcess
from bench.scripts.common import add_output_args, git_commit
from bench.scripts.validate_sim import _machine

ROWS = {"sleep_on_idle=false (SGLang's default)": "sglang.sleep_on_idle=false",
        "sleep_on_idle=true (CPU default)": "sglang.sleep_on_idle=true"}
IDLE_S = 10.0
GAP_S = 1.0
REQUESTS = 12


def one_server(override: str, log: Path) -> dict[str, Any]:
    """Idle CPU (cores) and wake-up latencies (s) of one server with ``override``."""
    with ServerProcess(["model.dtype=float32", override], log) as server:
        assert server.proc is not None
        procs = [psutil.Process(server.proc.pid), *server.descendants()]

        def cpu_s() -> float:
            return sum(sum(p.cpu_times()[:2]) for p in procs if p.is_running())

        body = {"text": "Hello there", "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
        httpx.post(server.base_url + "/generate", json=body, timeout=120).raise_for_status()
        time.sleep(2.0)  # NOTE: let the first request's tail (detokenizer, metrics) settle
        c0 = cpu_s()
        time.sleep(IDLE_S)
        idle = (cpu_s() - c0) / IDLE_S
        lat = []
        for _ in range(REQUESTS):
            time.sleep(GAP_S)
            t0 = time.monotonic()
            httpx.post(server.base_url + "/generate", json=body, timeout=120).raise_for_status()
            lat.append(time.monotonic() - t0)
    return {"idle_cores": idle, "latencies_s": lat}


def render(runs: dict[str, list[dict[str, Any]]], rounds: int, wall_s: float) -> str:
    lines = ["# An idle CPU server: SGLang's idle sleep off and on", "",
             f"Produced by `python -m bench.scripts.idle_cpu --rounds {rounds}` at commit {git_commit()} "
             f"on {_machine()}, {wall_s / 60:.0f} min wall. Method: the script's docstring (idle CPU over "
             f"{IDLE_S:g} s; {REQUESTS} one-token requests, each after {GAP_S:g} s idle). Per round, "
             "then the median over rounds in the last row of each server.", "",
             "| server | round | idle CPU (cores) | wake-up latency, median (ms) | max (ms) |",
             "|---|---|---|---|---|"]
    for name, rs in runs.items():
        for i, r in enumerate(rs):
            lat = r["latencies_s"]
            lines.append(f"| {name} | {i} | {r['idle_cores']:.2f} | {statistics.median(lat) * 1e3:.0f} | "
                         f"{max(lat) * 1e3:.0f} |")
        lines.append(f"| {name} | median | {statistics.median(r['idle_cores'] for r in rs):.2f} | "
                     f"{statistics.median(statistics.median(r['latencies_s']) for r in rs) * 1e3:.0f} | "
                     f"{statistics.median(max(r['latencies_s']) for r in rs) * 1e3:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    add_output_args(ap, "idle_cpu", "idle_cpu")
    args = ap.parse_args()
    git_commit()  # NOTE: stamps the run now (cached), before any work
    t0 = time.monotonic()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in ROWS}
    for i in range(args.rounds):
        for name, override in ROWS.items():
            folder = args.results / f"round{i}"
            folder.mkdir(parents=True, exist_ok=True)
            r = one_server(override, folder / f"{override.split('=')[1]}.log")
            runs[name].append(r)
            print(f"round {i} {name}: idle {r['idle_cores']:.2f} cores, "
                  f"wake-up median {statistics.median(r['latencies_s']) * 1e3:.0f} ms", flush=True)
    table = render(runs, args.rounds, time.monotonic() - t0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table)
    print(table)


if __name__ == "__main__":
    main()
