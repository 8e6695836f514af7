"""When requests reach the server: open-loop roots and closed-loop followers.

Roots arrive at their trace time. A follower is *released* when the request it
follows reaches a final state (finished, or turned away: the client moves on)
and arrives its think time (``delay_s``) later. Ties go to roots first, then
followers in release order (``NOTE``: deterministic for a given trace).
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
from collections.abc import Iterator
from typing import Protocol

from bench.traces.trace import Trace, TraceRequest


def paced(trace: Trace, interval_s: float) -> Trace:
    """``trace`` with open-loop requests at most one per ``interval_s``: each at
    ``max(its time, the previous one's + interval_s)``, in trace order
    (``sim.send_interval_s``); followers keep their think times.

    NOTE: order-preserving (roots stay sorted), so ties keep the trace's order."""
    if interval_s < 0:
        raise ValueError(f"sim.send_interval_s must be >= 0, got {interval_s}")
    if interval_s == 0:
        return trace
    moved, last, n = [], float("-inf"), 0
    for r in trace.requests:
        if r.after is not None:
            moved.append(r)
            continue
        at = max(r.arrival_s, last + interval_s)
        n += at != r.arrival_s
        last = at
        moved.append(r if at == r.arrival_s else dataclasses.replace(r, arrival_s=at))
    note = f"open-loop arrivals at least {interval_s * 1000:g} ms apart (sim.send_interval_s): {n} moved"
    return dataclasses.replace(trace, requests=tuple(moved), notes=(*trace.notes, note))


class ArrivalSource(Protocol):
    """What a simulator reads of its arrivals: ``Arrivals``, or a cluster
    replica's ``cluster.Inbox`` (the requests routed to it)."""

    def next_time(self) -> float: ...

    def until(self, t: float) -> Iterator[tuple[float, TraceRequest]]: ...

    def release_followers(self, rid: str, now: float) -> None: ...


class Arrivals:
    """The arrival stream of one replay."""

    def __init__(self, trace: Trace) -> None:
        self._roots = list(trace.roots())
        self._next = 0
        self._released: list[tuple[float, int, TraceRequest]] = []
        self._tie = itertools.count()
        self._followers: dict[str, list[TraceRequest]] = {}
        for r in trace.requests:
            if r.after is not None:
                self._followers.setdefault(r.after, []).append(r)

    def next_time(self) -> float:
        """Time of the next arrival (``inf`` when none is pending)."""
        t = self._roots[self._next].arrival_s if self._next < len(self._roots) else float("inf")
        if self._released and self._released[0][0] < t:
            t = self._released[0][0]
        return t

    def until(self, t: float) -> Iterator[tuple[float, TraceRequest]]:
        """``(arrival time, request)`` of everything arriving at or before ``t``."""
        while True:
            root_t = self._roots[self._next].arrival_s if self._next < len(self._roots) else float("inf")
            if self._released and self._released[0][0] < root_t and self._released[0][0] <= t:
                at, _, tr = heapq.heappop(self._released)
                yield at, tr
            elif root_t <= t:
                self._next += 1
                yield root_t, self._roots[self._next - 1]
            else:
                return

    def release_followers(self, rid: str, now: float) -> None:
        """``rid`` is done: its followers arrive their think time from ``now``."""
        for f in self._followers.pop(rid, ()):
            heapq.heappush(self._released, (now + f.delay_s, next(self._tie), f))
