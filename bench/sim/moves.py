"""Which sessions move when the fleet changes: replaying a cluster run's routing calls.

``replay_routes`` offers a fresh router the calls a ``Cluster`` run made, in
the same order, with the same draws and routing text, and its own in-flight
accounting: a request counts on the replica the replay chose from its arrival
until the time it reached its final state *in the run* (service times are
borrowed from the run). From ``change_s`` on, the registered fleet is
``after`` instead of ``before``. With ``after == before`` the replay makes the
run's own decisions (``tests/sim/test_sim_router.py``).

A session *moves* at a fleet change if its first turn at or after the change
goes to a different replica than in the replay without the change
(``moved_sessions``). Only sessions with turns on both sides of the change
count: they have KV cached somewhere that a move leaves behind.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence

from bench.schema import RoutingKey
from bench.sim.routing import routing_key, routing_text
from bench.traces.trace import TraceRequest
from policies.router import RouterPolicy, RouteView, WorkerView, check_decision

#: One routing call of a run: (arrival time, request, draw) (``Cluster.routed``).
Call = tuple[float, TraceRequest, int]


def replay_routes(make_router: Callable[[], RouterPolicy], calls: Sequence[Call],
                  finished_at: dict[str, float], block_size: int, key: RoutingKey,
                  before: tuple[str, ...], after: tuple[str, ...], change_s: float) -> dict[str, str]:
    """The URL each call goes to under a fresh router (see module docs)."""
    router = make_router()
    in_flight: dict[str, int] = {}
    done: list[tuple[float, int, str]] = []
    tie = itertools.count()
    out: dict[str, str] = {}
    for at, tr, draw in calls:
        while done and done[0][0] <= at:
            in_flight[heapq.heappop(done)[2]] -= 1
        urls = before if at < change_s else after
        view = RouteView(text=routing_text(tr, block_size),
                         workers=tuple(WorkerView(u, in_flight.get(u, 0)) for u in urls),
                         draw=draw, routing_key=routing_key(tr, key))
        url = urls[check_decision(view, router.route(view)).worker]
        in_flight[url] = in_flight.get(url, 0) + 1
        heapq.heappush(done, (finished_at.get(tr.rid, float("inf")), next(tie), url))
        out[tr.rid] = url
    return out


def moved_sessions(calls: Sequence[Call], base: dict[str, str], changed: dict[str, str],
                   change_s: float) -> tuple[int, int]:
    """``(sessions that move, sessions with turns on both sides of the change)``."""
    seen_before: set[str] = set()
    first_after: dict[str, str] = {}
    for at, tr, _ in calls:
        session = tr.session_id or tr.rid
        if at < change_s:
            seen_before.add(session)
        elif session in seen_before and session not in first_after:
            first_after[session] = tr.rid
    moved = sum(base[rid] != changed[rid] for rid in first_after.values())
    return moved, len(first_after)
