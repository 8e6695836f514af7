"""When requests reach the server: open-loop roots and closed-loop followers.

Roots arrive at their trace time. A follower is *released* when the request it
follows reaches a final state (finished, or turned away: the client moves on)
and arrives its think time (``delay_s``) later. Ties go to roots first, then
followers in release order (``NOTE``: deterministic for a given trace).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from typing import Protocol

from bench.traces.trace import Trace, TraceRequest


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
