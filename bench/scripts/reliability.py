"""Fault and soak runs on the live CPU server and a two-worker cluster -> ``bench/results/reliability.md``.

    python -m bench.scripts.reliability                       # the table (about 75 min on 2 cores)
    python -m bench.scripts.reliability --overload-minutes 1 --aborts 100 --fuzz-cases 50 --out /tmp/r.md
    python -m bench.scripts.reliability --sections disk --out /tmp/disk.md

Sections, each on freshly started units at the default model and defaults
(``python -m server`` as a user runs it):

* **Aborted streams**: ``--aborts`` streaming chat requests, 16 at a time, each
  abandoned at a random point (a fifth before the first byte, the rest after a
  random number of chunks); then the KV tokens SGLang holds (``/v1/loads``) and
  the resident memory of the server's whole process tree, before and after.
* **Overload**: the server's capacity is measured once (requests per second
  completed closed-loop by 8 clients, 16 output tokens), then Poisson arrivals at
  10x that for ``--overload-minutes`` against each admission option, and SGLang's
  own queue bound as the built-in to beat. Every request has a 60 s client
  timeout and counts as answered (complete), refused (429/503 with
  Retry-After), failed (anything else) or hung (no answer in time); the pool
  is sampled every 0.5 s.
* **Killed scheduler**: SIGKILL to the scheduler process (not the HTTP process)
  of a single server with 4 requests in flight: the unit's exit code, how long
  it took, which processes were left; then to one worker's scheduler of
  ``+router=prefix_hash cluster.replicas=2`` under 3 clients: the requests'
  fate and when the worker served again.
* **Fuzzed input**: ``bench.live.fuzz`` seeds against a single server: every
  status seen, and each case that got none of 200/400/413/422/429.
* **Disk full or unwritable**: SGLang's HiCache file storage filled to ENOSPC
  or made unwritable under a serving unit (``bench/scripts/reliability_disk.py``).

``--sections`` runs some sections only (a smoke run); the table is built from all.

Nothing here is tuned: admission options run at their defaults.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.live import faults
from bench.live.chat import wait_for
from bench.live.fuzz import ACCEPTED, outcomes
from bench.live.server import ServerProcess
from bench.scripts.common import add_output_args, git_commit
from bench.scripts.reliability_disk import disk_section, render_disk

OVERLOAD_X = 10
CLIENT_TIMEOUT_S = 60.0
OVERLOAD_TOKENS = 16
#: Admission rows: (label, overrides). SGLang's ``--max-queued-requests`` is its own bound (503).
ADMISSION = (("none (stock SGLang)", ()), ("SGLang `max_queued_requests=64`", ("sglang.max_queued_requests=64",)),
             ("`+admission=max_queue`", ("+admission=max_queue",)), ("`+admission=basin`", ("+admission=basin",)))
CLUSTER = ("+router=prefix_hash", "cluster.replicas=2")
FUZZ_SEEDS = (1, 2, 3, 31)
SECTIONS = ("aborts", "overload", "kill", "fuzz", "disk")


def unit_of(overrides: tuple[str, ...], logs: Path, name: str) -> ServerProcess:
    """A unit not started yet (``with`` starts and stops it)."""
    return ServerProcess(list(overrides), logs / f"{name}.log")


def fuzz_section(unit: ServerProcess, n: int) -> dict[str, Any]:
    statuses: Counter[int] = Counter()
    bad = []
    for seed in FUZZ_SEEDS:
        for out in outcomes(unit.base_url, seed, n):
            statuses[out.status] += 1
            if out.status not in ACCEPTED:
                bad.append({"seed": seed, "index": out.case.index, "endpoint": out.case.endpoint,
                            "what": out.case.what, "status": out.status, "detail": out.detail})
    healthy = httpx.get(unit.base_url + "/health", timeout=60).status_code == 200
    return {"seeds": FUZZ_SEEDS, "cases": n * len(FUZZ_SEEDS), "statuses": dict(statuses), "bad": bad,
            "healthy_after": healthy}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_output_args(parser, "reliability", "reliability")
    parser.add_argument("--aborts", type=int, default=1000)
    parser.add_argument("--overload-minutes", type=float, default=10.0)
    parser.add_argument("--fuzz-cases", type=int, default=400, help="per seed")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated, of {', '.join(SECTIONS)}")
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    if sections - set(SECTIONS):
        parser.error(f"unknown sections {sorted(sections - set(SECTIONS))}; choose from {', '.join(SECTIONS)}")
    git_commit()  # NOTE: stamps the run now (cached), before any work
    args.results.mkdir(parents=True, exist_ok=True)
    logs = Path(tempfile.mkdtemp(prefix="reliability-"))
    out: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    t_start = time.perf_counter()

    def save(key: str, value: Any) -> None:
        out[key] = value
        (args.results / "runs.json").write_text(json.dumps(out, indent=1, default=str))
        print(f"{key}: {json.dumps(value, default=str)[:400]}", flush=True)

    if sections & {"aborts", "fuzz", "overload"}:
        with unit_of((), logs, "single") as unit:
            if "aborts" in sections:
                save("aborts", faults.abort_streams(unit, args.aborts, 16, seed=0))
            if "fuzz" in sections:
                save("fuzz", fuzz_section(unit, args.fuzz_cases))
            if "overload" in sections:
                save("capacity_rps", faults.capacity(unit, 30.0, 8, OVERLOAD_TOKENS, seed=1))
    if "overload" in sections:
        rate = OVERLOAD_X * out["capacity_rps"]
        rows: list[dict[str, Any]] = []
        for label, overrides in ADMISSION:
            with unit_of(overrides, logs, f"overload-{len(rows)}") as unit:
                row = faults.overload(unit, rate, 60 * args.overload_minutes, OVERLOAD_TOKENS, CLIENT_TIMEOUT_S,
                                      seed=2)
                row |= {"label": label, "overrides": list(overrides), "drain_s": faults.drain_s(unit.base_url)}
                rows.append(row)
                save("overload", rows)
    if "kill" in sections:
        unit = unit_of((), logs, "kill-single").start()
        save("kill_single", faults.kill_scheduler(unit))
        with unit_of(CLUSTER, logs, "kill-cluster") as unit:
            wait_for(lambda: faults.healthy(f"http://127.0.0.1:{unit.port + 1}")
                            and faults.healthy(f"http://127.0.0.1:{unit.port + 2}"), timeout=300, what="workers")
            save("kill_cluster", faults.kill_worker_scheduler(unit, unit.port + 1) | {"workers": 2})
    if "disk" in sections:
        save("disk", disk_section(logs))
    wall = time.perf_counter() - t_start
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(out, wall))
    print(f"wrote {args.out} ({wall / 60:.1f} min); logs in {logs}")


def render(out: dict[str, Any], wall: float) -> str:
    lines = [
        "# Reliability: aborted streams, overload, killed schedulers, fuzzed input, broken disks (live CPU server)",
        "",
        f"Produced by `python -m bench.scripts.reliability` at commit {git_commit()} ({datetime.now(UTC):%Y-%m-%d}), "
        f"{wall / 60:.0f} min on a 2-core machine; SmolLM2-135M on SGLang 0.5.23 `--device cpu`, one thread per "
        "server, every option at its defaults. What each section does: the script's docstring.",
        "",
    ]
    for title, key, part in (("Aborted streams", "aborts", _aborts), ("Overload", "overload", _overload),
                             ("Killed scheduler", "kill_single", _kills), ("Fuzzed input", "fuzz", _fuzz),
                             ("Disk full or unwritable", "disk", lambda o: render_disk(o["disk"]))):
        lines += part(out) if key in out else [f"## {title}", "", "Not run in this build (`--sections`).", ""]
    return "\n".join(lines)


#: The aborts section's planned outcomes; anything else (a status, a transport error) is "other".
_KNOWN_ABORTS = ("hung up before the first byte", "hung up mid-stream", "finished before the hang-up point")


def _aborts(out: dict[str, Any]) -> list[str]:
    a = out["aborts"]
    return [
        "## Aborted streams",
        "",
        "| streams (16 at a time) | hung up before the first byte | mid-stream | finished first | other | "
        "KV tokens held after | requests left running / waiting | RSS before -> after (MiB) |",
        "|---|---|---|---|---|---|---|---|",
        f"| {a['streams']} | {a['outcomes'].get('hung up before the first byte', 0)} | "
        f"{a['outcomes'].get('hung up mid-stream', 0)} | {a['outcomes'].get('finished before the hang-up point', 0)} | "
        f"{sum(v for k, v in a['outcomes'].items() if k not in _KNOWN_ABORTS)} | {a['kv_tokens_after']} | {a['running_after']} / {a['waiting_after']} | "
        f"{a['rss_before_mib']:.0f} -> {a['rss_after_mib']:.0f} ({a['rss_after_mib'] - a['rss_before_mib']:+.0f}) |",
        "",
    ]


def _overload(out: dict[str, Any]) -> list[str]:
    lines = [
        "## Overload",
        "",
        f"Capacity: {out['capacity_rps']:.2f} requests/s (closed loop, 8 clients, {OVERLOAD_TOKENS} output tokens); "
        f"offered: {OVERLOAD_X}x that, Poisson, for {out['overload'][0]['seconds'] / 60:.0f} min per row, half "
        f"of the requests streaming, each with a {CLIENT_TIMEOUT_S:.0f} s client timeout. Answered p50/p99: "
        "seconds from send to the complete answer.",
        "",
        "| admission | sent | answered | refused (429/503 + Retry-After) | failed | hung (no answer in "
        f"{CLIENT_TIMEOUT_S:.0f} s) | answered p50 / p99 | KV peak / pool | server alive; idle (no request, no KV) after the last answer |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in out["overload"]:
        o = r["outcomes"]
        failed = sum(v for k, v in o.items() if k not in ("answered", "refused", "hung"))
        p = (f"{r['answered_p50_s']:.1f} / {r['answered_p99_s']:.1f} s" if r["answered_p50_s"] is not None else "-")
        lines.append(f"| {r['label']} | {r['sent']} | {o.get('answered', 0)} | {o.get('refused', 0)} | {failed} | "
                     f"{o.get('hung', 0)} | {p} | {r['kv_peak']} / {r['capacity']} | "
                     f"{'yes' if r['alive'] else 'NO'}, {_secs(r['drain_s'])} |")
    return [*lines, ""]


def _kills(out: dict[str, Any]) -> list[str]:
    ks, kc = out["kill_single"], out["kill_cluster"]
    return [
        "## Killed scheduler",
        "",
        "| unit | killed | requests in flight | outcome | time | processes left |",
        "|---|---|---|---|---|---|",
        f"| single server | its scheduler (SIGKILL) | {json.dumps(ks['in_flight'])} | "
        f"supervisor exited with {ks['exit_code']} | {_secs(ks['exit_s'])} after the kill | "
        f"{len(ks['orphans'])} |",
        f"| {kc['workers']} workers behind SMG | worker 0's scheduler (SIGKILL) | 3 clients in a loop: "
        f"{json.dumps(kc['requests'])} | worker restarted by the supervisor; unit alive: "
        f"{'yes' if kc['unit_alive'] else 'NO'} | down {_secs(kc['down_s'])}, serving again "
        f"{_secs(kc['serving_again_s'])} after the kill | - |",
        "",
    ]


def _fuzz(out: dict[str, Any]) -> list[str]:
    fz = out["fuzz"]
    lines = [
        "## Fuzzed input",
        "",
        f"{fz['cases']} cases (`bench.live.fuzz`, seeds {', '.join(map(str, fz['seeds']))}): statuses "
        + ", ".join(f"{k}: {v}" for k, v in sorted(fz["statuses"].items())) + f"; outside 200/400/413/422/429: "
        f"{len(fz['bad'])}; healthy after: {'yes' if fz['healthy_after'] else 'NO'}.",
        "",
    ]
    lines += [f"- seed {b['seed']} case {b['index']} {b['endpoint']} ({b['what']}): {b['status']} {b['detail'][:120]}"
              for b in fz["bad"]]
    return lines + ([""] if fz["bad"] else [])


def _secs(v: float | None) -> str:
    return "never" if v is None else f"{v:.1f} s"


if __name__ == "__main__":
    main()
