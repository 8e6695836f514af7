"""SMG's routing policies in front of 2/4/8 simulated replicas -> ``bench/results/router.md``.

    python -m bench.scripts.router                  # writes the table (20 min measured on a busy 2-core machine)
    python -m bench.scripts.router --out /tmp/r.md

One H100 with Llama-3.1-8B per replica. Every row is one ``python -m bench``
run (printed below the tables) with one ``+router`` option at SMG 1.13's CLI
defaults; ``consistent_hashing`` runs with the session id as the routing key
(``sim.routing_key=session``: a client that sends ``x-smg-routing-key``), the
others see no key. Two workloads, each a deterministic subsample to keep the
run short:

* Mooncake conversations (the first ``MOONCAKE_WINDOW_S`` seconds of the
  conversation trace, derived sessions, later turns closed-loop) at 2, 4 and 8
  replicas, at the recorded pace (x1) and at half of it (x2);
* Claude Code sessions (the first ``CC_SESSIONS`` sessions in file-name
  order, recorded think times) at 4 replicas: long agent sessions whose
  history only one replica holds.

Session moves (Mooncake): from each run's own routing calls (same order,
draws, text; service times from the run), ``bench.sim.moves`` replays the
router three times: the fleet unchanged; a replica added (N -> N+1) at the
median call time; the last replica removed (N -> N-1) then. A session
*moves* if its first turn after the change goes to another replica than
without the change; counted over sessions with turns on both sides of it.
"ideal" is what a perfect consistent scheme moves: 1/(N+1) of sessions on an
add, the removed replica's share on a remove.

Nothing here was tuned on this data: every router runs at its defaults.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bench.config import compose_bench, resolve_bench
from bench.report import fmt
from bench.run import run_bench
from bench.scripts.common import add_output_args, git_commit
from bench.sim.cluster import Cluster
from bench.sim.moves import moved_sessions, replay_routes
from bench.sim.routing import replica_url

MOONCAKE_WINDOW_S = 900
CC_SESSIONS = 16
COMMON = ("accelerator=h100", "model_profile=llama-3.1-8b", "output.progress=false",
          "output.requests_csv=false", "output.plots=false")
ROUTERS = ("round_robin", "random", "power_of_two", "cache_aware", "prefix_hash", "consistent_hashing")
KEYED = {"consistent_hashing": "session"}


@dataclass(frozen=True)
class Section:
    """One workload at one load and fleet size."""

    title: str
    trace: tuple[str, ...]
    scale: float
    replicas: int
    with_moves: bool


MOONCAKE = ("trace=mooncake_conversation", "trace.mooncake.sessions=true",
            f"trace.window_end_s={MOONCAKE_WINDOW_S}")
CLAUDE = ("trace=claude_code_sessions", f"trace.claude_code.max_sessions={CC_SESSIONS}")
SECTIONS = tuple(Section(f"Mooncake conversations, {pace}, {n} replicas", MOONCAKE, scale, n, True)
                 for pace, scale in (("recorded pace (x1)", 1.0), ("half pace (x2)", 2.0)) for n in (2, 4, 8)) \
    + (Section("Claude Code sessions, recorded pace (x1), 4 replicas", CLAUDE, 1.0, 4, False),)

COLUMNS = ("router", "hit rate", "TTFT p50", "TTFT p99", "E2E p50", "busiest / idlest replica",
           "moves N+1 (ideal)", "moves N-1 (ideal)")


def overrides_for(section: Section, router: str) -> list[str]:
    out = [*section.trace, f"trace.time_scale={section.scale:g}", *COMMON, f"+router={router}",
           f"sim.replicas={section.replicas}"]
    return out + ([f"sim.routing_key={KEYED[router]}"] if router in KEYED else [])


def moves(cluster: Cluster, make: Callable[[], Any], block_size: int, key: Any) -> dict[str, Any]:
    """Share of live sessions that move when a replica is added or removed (module docs)."""
    calls = cluster.routed
    n = len(cluster.replicas)
    urls = tuple(replica_url(i) for i in range(n))
    change = calls[len(calls) // 2][0]

    def replay(after: tuple[str, ...]) -> dict[str, str]:
        return replay_routes(make, calls, cluster.finished_at, block_size, key, urls, after, change)
    base = replay(urls)
    added, live = moved_sessions(calls, base, replay(urls + (replica_url(n),)), change)
    out: dict[str, Any] = {"live": live, "added": added, "ideal_added": 1 / (n + 1)}
    if n > 1:
        removed, _ = moved_sessions(calls, base, replay(urls[:-1]), change)
        forced, _ = moved_sessions(calls, base, {r: ("gone" if u == urls[-1] else u) for r, u in base.items()},
                                   change)
        out |= {"removed": removed, "ideal_removed": forced / live if live else None}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_output_args(parser, "router", "router")
    args = parser.parse_args()
    git_commit()  # NOTE: stamps the run now (cached), before any work
    t_start = time.perf_counter()
    runs: list[dict[str, Any]] = []
    for k, section in enumerate(SECTIONS):
        for router in ROUTERS:
            overrides = overrides_for(section, router)
            settings = resolve_bench(compose_bench(overrides))
            t0 = time.perf_counter()
            result = run_bench(settings)
            cluster = result.pop("cluster")
            mv = moves(cluster, functools.partial(settings.build, "router"), cluster.trace.block_size,
                       settings.sim.routing_key) if section.with_moves else None
            runs.append({"section": k, "router": router, "overrides": overrides, "summary": result["summary"],
                         "per_replica": result["meta"]["per_replica"],
                         "branches": result["meta"]["router_branches"], "moves": mv,
                         "meta": {key: result["meta"][key] for key in ("trace", "trace_source", "sim")}})
            print(f"{section.title} {router}: {time.perf_counter() - t0:.1f} s", flush=True)
    wall = time.perf_counter() - t_start
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "runs.json").write_text(json.dumps(runs, indent=1, default=str))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(runs, wall))
    print(f"wrote {args.out} ({wall / 60:.1f} min)")


def _share(moved: int | None, live: int) -> str:
    return "-" if moved is None or not live else f"{100 * moved / live:.0f} %"


def row(run: dict[str, Any]) -> list[str]:
    s, mv = run["summary"], run["moves"]
    counts = [p["requests"] for p in run["per_replica"]]
    name = f"`{run['router']}`" + (" (key: session)" if run["router"] in KEYED else "")
    cells = [name, fmt(s["prefix_hit_rate"], 100, "%"), fmt(s["ttft_s"]["p50"], 1, "s"),
             fmt(s["ttft_s"]["p99"], 1, "s"), fmt(s["e2e_s"]["p50"], 1, "s"), f"{max(counts)} / {min(counts)}"]
    if mv is None:
        return cells + ["-", "-"]
    ideal_rm = mv.get("ideal_removed")
    return cells + [
        f"{_share(mv['added'], mv['live'])} ({100 * mv['ideal_added']:.0f} %)",
        f"{_share(mv.get('removed'), mv['live'])} ({100 * ideal_rm:.0f} %)" if ideal_rm is not None else "-",
    ]


def render(runs: list[dict[str, Any]], wall: float) -> str:
    sim = runs[0]["meta"]["sim"]
    lines = [
        "# Routing policies across replicas (simulated)",
        "",
        f"Produced by `python -m bench.scripts.router` at commit {git_commit()} ({datetime.now(UTC):%Y-%m-%d}), "
        f"{wall / 60:.0f} min on one core. Each replica is one H100 (80 GB) with Llama-3.1-8B (KV pool "
        f"{sim['capacity']:,} tokens, chunked prefill {sim['chunked_prefill_size']}; a roofline cost model, so "
        "compare rows, not absolute numbers), SGLang's own queue order and LRU cache. The gateway runs the pure "
        "twins of SMG 1.13's policies at their CLI defaults (`policies/router/`, `docs/router.md`): they see "
        "in-flight counts only (no backend load reports); ties, misses and `random` draw from a seeded "
        "generator. `consistent_hashing` gets the session id as `x-smg-routing-key` (without a key it is "
        "`random`); the others get no key. Routing text: each 512-token (Mooncake) or 64-token (Claude Code) "
        "block as 4 characters per token derived from its hash, so texts share prefixes exactly as prompts "
        "share blocks (`bench/sim/routing.py`).",
        "",
        f"Workloads (deterministic subsamples): the first {MOONCAKE_WINDOW_S} s of Mooncake's conversation "
        "trace (derived sessions, later turns closed-loop after the recorded gap; every request starts with "
        f"the same 512-token block); the first {CC_SESSIONS} Claude Code sessions in file-name order "
        "(kv-cache-tester; closed-loop turns after their recorded think times).",
        "",
        "Hit rate: prompt tokens served from the serving replica's prefix cache (token-weighted). Busiest / "
        "idlest: requests routed to the replicas with the most and the fewest. Moves: share of the sessions "
        "alive at the change (turns before and after the median routing call) whose first turn after it goes "
        "elsewhere than with the fleet unchanged, from replaying the run's routing calls "
        "(`bench/sim/moves.py`); in brackets the ideal: 1/(N+1) on an add, the removed replica's share on a "
        "remove.",
        "",
    ]
    for k, section in enumerate(SECTIONS):
        rows = [r for r in runs if r["section"] == k]
        if not rows:
            continue
        lines += [f"## {section.title}", "", f"{rows[0]['summary']['requests']} requests.", "",
                  "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(row(r)) + " |" for r in rows]
        lines.append("")
    lines += ["Commands (one per row, from the repository root):", "", "```"]
    lines += [f"python -m bench {' '.join(r['overrides'])}" for r in runs]
    lines += ["```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
