"""When a client would see a simulated token, on a device whose forward pass is synchronous.

SGLang's overlap loop (``Scheduler.event_loop_overlap``) launches iteration
``i+1`` and only then processes iteration ``i``'s results (streams its tokens,
frees finished requests). On a GPU the launch returns at once, so the lag is
CPU bookkeeping time, folded into the cost model's overhead. On CPU the
"launch" *is* the forward pass: iteration ``i``'s tokens reach clients when
iteration ``i+1`` ends, or right away when nothing runs next (measured on the
CPU server: TTFT with 1 output token = the prefill; with more = prefill + one
decode step; the last token follows the one before it at once).

The simulator's token times are iteration ends. ``IterationLog`` wraps its
cost model to record every iteration's ``[start, end)``; ``client_visible``
then moves each finished request's token times to the end of the iteration
that followed back to back (``AcceleratorConfig.synchronous_forward``).

``IterationLog.engine_counters`` rebuilds SGLang's own step counters
(``bench.counters``) from the log, with the same accounting: a prefill is busy
until its result is processed, a decode step lasts from the previous decode
launch to its own.

Approximation (``NOTE``): only the times move. The later result processing
does not delay freeing KV or releasing closed-loop followers in the simulation.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from bench.counters import EngineCounters
from bench.metrics import RequestRecord
from bench.schema import AcceleratorConfig
from bench.sim.cost import IterationCost

#: SGLang drops a decode cadence sample at or above this (``STEP_MAX_US``).
STEP_MAX_S = 2.0


class IterationLog:
    """A cost model wrapper recording each iteration's start and end.

    ``clock`` must return the simulator's time *before* the iteration:
    the engine calls the cost model inside ``self.now += cost.<phase>_time(...)``,
    which reads ``now`` before the call and adds the result after it.
    """

    def __init__(self, cost: IterationCost, clock: Callable[[], float] | None = None, lagged: bool = True) -> None:
        self.cost = cost
        self.clock = clock
        self.lagged = lagged
        """Whether an iteration's results are processed after the next one ran (the
        overlap loop on a synchronous device); false: when it ends (no overlap loop)."""
        self.starts = array("d")
        self.ends = array("d")
        self.prefill = array("b")
        """1 for a prefill iteration, 0 for a decode step."""
        self.sizes = array("q")
        """Requests in the iteration."""
        self.new_tokens = array("q")
        """Prompt tokens computed (prefill; 0 for decode)."""

    def __getattr__(self, name: str) -> Any:  # kv_capacity_tokens, shape, ...
        return getattr(self.cost, name)

    def _log(self, seconds: float, prefill: bool, requests: int, tokens: int) -> float:
        assert self.clock is not None, "IterationLog.clock is set once the simulator exists"
        start = self.clock()
        self.starts.append(start)
        # NOTE: the same float operation as the engine's ``now += seconds``,
        # so every token time equals one logged end exactly.
        self.ends.append(start + seconds)
        self.prefill.append(prefill)
        self.sizes.append(requests)
        self.new_tokens.append(tokens)
        return seconds

    def prefill_time(self, extends: list[tuple[int, int]], *gap_work: Any) -> float:
        """The cost model's prefill time (``gap_work``: its gaps and extra seconds)."""
        return self._log(self.cost.prefill_time(extends, *gap_work), True, len(extends),
                         sum(e for e, _ in extends))

    def decode_time(self, batch: int, context_tokens: int) -> float:
        return self._log(self.cost.decode_time(batch, context_tokens), False, batch, 0)

    def verify_time(self, batch: int, draft: int, context_tokens: int, extra_s: float = 0.0) -> float:
        return self._log(self.cost.verify_time(batch, draft, context_tokens, extra_s), False, batch, 0)

    def visible_ends(self) -> tuple[np.ndarray, np.ndarray]:
        """``(ends, visible)``: each iteration's end, and when its tokens are seen."""
        starts = np.frombuffer(self.starts, dtype=np.float64)
        ends = np.frombuffer(self.ends, dtype=np.float64)
        visible = ends.copy()
        if not self.lagged:
            return ends, visible
        back_to_back = starts[1:] == ends[:-1]
        visible[:-1][back_to_back] = ends[1:][back_to_back]
        return ends, visible


    def engine_counters(self) -> EngineCounters:
        """SGLang's step counters as the server would have counted this run."""
        starts = np.frombuffer(self.starts, dtype=np.float64)
        ends, visible = self.visible_ends()
        prefill = np.frombuffer(self.prefill, dtype=np.int8).astype(bool)
        sizes = np.frombuffer(self.sizes, dtype=np.int64).astype(np.float64)
        busy, last_end = 0.0, None
        for i in np.flatnonzero(prefill):
            start = starts[i] if last_end is None else max(starts[i], last_end)
            busy += visible[i] - start
            last_end = visible[i]
        # NOTE: SGLang's cadence: a decode batch launched right after another decode
        # batch ended (no idle gap, no prefill between) lasts from that launch to its own.
        if len(starts) > 1:
            cadence = (~prefill[1:]) & (~prefill[:-1]) & (starts[1:] == ends[:-1])
            t = (starts[1:] - starts[:-1])[cadence]
            b = sizes[1:][cadence]
            keep = t < STEP_MAX_S
            t, b = t[keep], b[keep]
        else:
            t = b = np.zeros(0)
        return EngineCounters(
            prefill_busy_s=float(busy), prefill_tokens=int(np.frombuffer(self.new_tokens, dtype=np.int64).sum()),
            decode_steps=len(t), decode_batch_sum=float(b.sum()), decode_time_s=float(t.sum()),
            decode_batch_sq_sum=float((b * b).sum()), decode_batch_time_sum=float((b * t).sum()))


def client_visible(records: Sequence[RequestRecord], log: IterationLog) -> list[RequestRecord]:
    """``records`` with finished requests' token times as a client sees them."""
    ends, visible = log.visible_ends()
    order = np.argsort(ends, kind="stable")
    sorted_ends, sorted_visible = ends[order], visible[order]

    def move(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(sorted_ends, t)
        ok = (i < len(sorted_ends)) & (sorted_ends[np.minimum(i, len(sorted_ends) - 1)] == t)
        if not ok.all():
            raise ValueError("a token time is not the end of a logged iteration")
        return sorted_visible[i]

    out = []
    for r in records:
        if r.status != "finished" or r.first_token_s is None or r.finish_s is None:
            out.append(r)
            continue
        first, finish = move(np.array([r.first_token_s, r.finish_s]))
        times = move(r.token_times) if r.token_times is not None else None
        out.append(replace(r, first_token_s=float(first), finish_s=float(finish), token_times=times))
    return out


class NoOverlap:
    """A cost model wrapper: every iteration ``slowdown`` times as long (SGLang's
    overlap scheduler off, ``AcceleratorConfig.no_overlap_slowdown``)."""

    def __init__(self, cost: IterationCost, slowdown: float) -> None:
        self.cost = cost
        self.slowdown = slowdown

    def __getattr__(self, name: str) -> Any:  # kv_bytes_per_token, shape, ...
        return getattr(self.cost, name)

    def prefill_time(self, extends: list[tuple[int, int]], *gap_work: Any) -> float:
        return self.cost.prefill_time(extends, *gap_work) * self.slowdown

    def decode_time(self, batch: int, context_tokens: int) -> float:
        return self.cost.decode_time(batch, context_tokens) * self.slowdown

    def verify_time(self, batch: int, draft: int, context_tokens: int, extra_s: float = 0.0) -> float:
        return self.cost.verify_time(batch, draft, context_tokens, extra_s) * self.slowdown


def overlap_charged(cost: IterationCost, accel: AcceleratorConfig, overlap_off: Sequence[str]
                    ) -> tuple[IterationCost, bool]:
    """``(cost model, clients see tokens one iteration late)`` of a server whose chosen kinds
    turned SGLang's overlap scheduler off for ``overlap_off``'s reasons (empty: it runs).

    NOTE: as the server runs it: an option that forces ``disable_overlap_schedule``
    pays the accelerator's ``no_overlap_slowdown`` on every iteration, and its
    clients see each iteration's tokens when it ends (no ``synchronous_forward`` lag).
    On a device whose server runs without it by default (``overlap_schedule: false``)
    the cost model was fitted without it: nothing to charge, nothing delayed."""
    if not accel.overlap_schedule:
        return cost, False
    if not overlap_off:
        return cost, accel.synchronous_forward
    if accel.no_overlap_slowdown == 1.0:
        return cost, False
    return NoOverlap(cost, accel.no_overlap_slowdown), False
