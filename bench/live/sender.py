"""When a live replay sends each request: open-loop roots, closed-loop followers.

The same rules as the simulator's ``bench.sim.arrivals.Arrivals``: a root is
sent at its trace time; a follower (``after`` set) is sent its think time
(``delay_s``) after the request it follows reached a final state *as the client
saw it*: answered, turned away, failed or timed out (the client moves on).

Times are seconds on ``clock`` (``time.perf_counter``, bench_serving's clock)
from the replay's origin ``t0``. Every request runs in its own task, so a slow
answer never delays another request's send. One dispatcher starts the roots'
tasks in trace order, so roots with equal times (Mooncake's come in 3 s steps)
are handed to ``send`` in trace order, as the simulator admits them. NOTE:
each then opens its own connection, so the server may see requests of one
instant milliseconds apart in another order (under CPU load it does).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from bench.traces.trace import Trace, TraceRequest

SendFn = Callable[[TraceRequest], Awaitable[Any]]


@dataclass(frozen=True)
class Sent:
    """One request as the replay handled it (times from the origin)."""

    request: TraceRequest
    scheduled_s: float
    """When the rules above said to send it."""
    sent_s: float
    """When it was handed to the send function (the gap to ``scheduled_s`` is client lag)."""
    done_s: float
    """When the send function returned, raised or timed out."""
    outcome: Any = None
    """What the send function returned (None when it raised or timed out)."""
    error: str = ""
    """Why there is no outcome."""


class Sender:
    """Replays a trace's arrival pattern through ``send`` (see module docs)."""

    def __init__(self, trace: Trace, send: SendFn, *, timeout_s: float = float("inf"),
                 clock: Callable[[], float] = time.perf_counter,
                 on_done: Callable[[Sent], None] | None = None) -> None:
        self.trace = trace
        self.send = send
        self.timeout_s = timeout_s
        self.clock = clock
        self.on_done = on_done
        self.t0 = 0.0
        self._followers: dict[str, list[TraceRequest]] = {}
        for r in trace.requests:
            if r.after is not None:
                self._followers.setdefault(r.after, []).append(r)
        self._tasks: set[asyncio.Task[None]] = set()
        self._sent: list[Sent] = []

    def now(self) -> float:
        """Seconds since the origin."""
        return self.clock() - self.t0

    async def run(self, t0: float | None = None) -> list[Sent]:
        """Send every request; return them all in completion order. ``t0``
        (default: now) is the origin on ``clock``."""
        self.t0 = self.clock() if t0 is None else t0
        self._start(self._dispatch_roots())
        # NOTE: the dispatcher and every finishing request spawn their tasks before
        # their own task ends, so the set is empty only once nothing can be sent.
        while self._tasks:
            await asyncio.wait(set(self._tasks))
        return self._sent

    async def _dispatch_roots(self) -> None:
        for r in self.trace.roots():
            await self._until(r.arrival_s)
            # NOTE: tasks start in creation order, so equal times keep trace order.
            self._start(self._fire(r, r.arrival_s))

    def _start(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _until(self, at: float) -> None:
        """Sleep until ``clock`` reads at least ``at``.

        NOTE: asyncio's timers run on the loop's clock and may fire up to its
        resolution early; on ``clock`` that was measured 0.3 ms before ``at``, so
        the remainder is slept again (a request never goes out early)."""
        while (wait := at - self.now()) > 0:
            await asyncio.sleep(wait)

    async def _fire(self, r: TraceRequest, at: float) -> None:
        await self._until(at)
        sent = self.now()
        outcome, error = None, ""
        try:
            limit = None if self.timeout_s == float("inf") else self.timeout_s
            outcome = await asyncio.wait_for(self.send(r), limit)
        except TimeoutError:
            error = f"no answer within {self.timeout_s:g} s (client timeout)"
        except Exception as exc:  # NOTE: one failing request must not end the replay
            error = f"{type(exc).__name__}: {exc}"
        done = self.now()
        record = Sent(r, at, sent, done, outcome, error)
        self._sent.append(record)
        for f in self._followers.pop(r.rid, ()):
            self._start(self._fire(f, done + f.delay_s))
        if self.on_done is not None:
            self.on_done(record)
