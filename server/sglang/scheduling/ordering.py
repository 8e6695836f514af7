"""Scheduling inside SGLang's scheduler: the queue order decided by a pure policy.

Hop 6 of docs/lifecycle.md: SGLang calls ``SchedulePolicy.calc_priority`` each
prefill pass; ``SwitchboardSchedulePolicy`` keeps the queue as rows of a
``QueueColumnStore``, cache hits current with a ``MatchTracker``, asks the
policy (columns or views) and reorders ``waiting_queue`` in place. What other
kinds add to the pass reaches it as the scheduler's event seams (``events.py``):
the arrival gate revisits deferred requests and keeps them last
(``GatesArrival``), and chunk limits (``LimitsChunk``, e.g. the gap cache's:
a continuing chunk ends at the next gap) bound SGLang's own; seams told of
the final order (``OnQueueOrdered``, e.g. the eviction seam's waiting-prefix
refresh) hear it last.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
from sglang.srt.managers.schedule_policy import SchedulePolicy

from policies.scheduling import QueueView, SchedulingPolicy, check_permutation
from policies.scheduling.columns import RanksColumns, check_ranking
from server.sglang.scheduling.events import GatesArrival, LimitsChunk, OnQueueOrdered
from server.sglang.scheduling.hook_clock import HOOK_CLOCK
from server.sglang.scheduling.matching import MatchTracker
from server.sglang.scheduling.queue_columns import QueueColumnStore

#: Requests at the front of each decided order whose cache hit is re-checked
#: before the order is used (evictions only show there; see matching.py).
HEAD_RECHECK = 16


class SwitchboardSchedulePolicy(SchedulePolicy):
    """SGLang's ``SchedulePolicy`` with the queue order decided by a pure policy.

    Without an order policy it keeps SGLang's own order (``--schedule-policy``)
    and only keeps deferred requests at the back. With one, the queue is kept
    as rows of a ``QueueColumnStore`` across passes, cache hits by a
    ``MatchTracker``; a policy that ranks columns (``RanksColumns``) is called
    with them, any other with ``RequestView``s.
    """

    def __init__(self, policy: str, tree_cache: Any, enable_hierarchical_cache: bool,
                 enable_priority_scheduling: bool, schedule_low_priority_values_first: bool,
                 *, order: SchedulingPolicy | None = None,
                 gate: GatesArrival | None = None,
                 chunk_limits: Sequence[LimitsChunk] = (),
                 ordered: Sequence[OnQueueOrdered] = (),
                 prefill_clock: Callable[[], int] | None = None,
                 head_bounds: Callable[[Any], tuple[int | None, float]] | None = None) -> None:
        # NOTE: with our own order we run SGLang's cache-aware (lpm) slot, so the
        # queue is prefix-matched each pass and the scheduler treats it as matched.
        super().__init__("lpm" if order is not None else policy, tree_cache,
                         enable_hierarchical_cache, enable_priority_scheduling,
                         schedule_low_priority_values_first)
        self.order_policy = order
        self.gate = gate
        self.chunk_limits = tuple(chunk_limits)
        self.ordered = tuple(ordered)
        self.prefill_clock = prefill_clock
        self.head_bounds = head_bounds
        """``running_batch -> (admit_limit, prefill_budget_tokens)`` of this pass."""
        self.store = QueueColumnStore()
        self._columnar = isinstance(order, RanksColumns)
        self.tracker: MatchTracker | None = None
        # NOTE: no tracker when the policy reads no hits (``needs.cache_hits``)
        # or the radix cache is off.
        if order is not None and order.needs.cache_hits and not getattr(tree_cache, "disable", False):
            self.tracker = MatchTracker(tree_cache)
            self.tracker.watch_tree()

    def _determine_active_policy(self, waiting_queue: list[Any]) -> Any:
        if self.order_policy is not None:
            # NOTE: no silent FCFS fallback for long queues (SGLang's > 128 rule):
            # the chosen policy decides for every queue length.
            return self.policy
        return super()._determine_active_policy(waiting_queue)

    def shortest_prefill_chunk_limit(self, chunked_req: Any, waiting_queue: list[Any], budget: int,
                                     page_size: int) -> int | None:
        limit: int | None = super().shortest_prefill_chunk_limit(chunked_req, waiting_queue, budget, page_size)
        for seam in self.chunk_limits:  # NOTE: every seam's bound holds: the smallest wins
            bound = seam.chunk_limit(self.tree_cache, chunked_req)
            if bound is not None:
                limit = bound if limit is None else min(bound, limit)
        return limit

    def forget(self, req: Any) -> None:
        """``req`` (re-)enters the queue: drop what is kept about its last stay."""
        self.store.forget(req)
        if self.tracker is not None:
            self.tracker.forget(req.rid)

    def calc_priority(self, waiting_queue: list[Any], running_batch: Any = None,
                      processed_tokens: int = 0) -> None:
        t = time.perf_counter()
        if self.gate is not None:
            self.gate.revisit(waiting_queue)
        if self.order_policy is None:
            own = time.perf_counter() - t  # NOTE: SGLang's own order is not a hook's time
            super().calc_priority(waiting_queue, running_batch, processed_tokens)
            t = time.perf_counter()
        else:
            own = 0.0
            clock = self.prefill_clock() if self.prefill_clock is not None else processed_tokens
            self._apply_order(waiting_queue, running_batch, clock)
        if self.gate is not None:
            waiting_queue.sort(key=self.gate.holds)  # stable: deferred go last
            self.store.remember(None)  # NOTE: the rows no longer follow the queue
        if self.ordered:
            matched = self.waiting_queue_prefix_matched(waiting_queue)
            for seam in self.ordered:
                seam.queue_ordered(waiting_queue, matched)
        HOOK_CLOCK.add("order", own + time.perf_counter() - t)

    def _apply_order(self, waiting_queue: list[Any], running_batch: Any, clock: int) -> None:
        sync = self.store.sync(waiting_queue)
        if self.tracker is not None:
            for req in sync.departed:
                self.tracker.forget(req.rid)
            for req in sync.arrived:
                self.tracker.add(req)
                self.store.set_cached(req)
            for req in self.tracker.apply_inserts():
                self.store.set_cached(req)
        if not waiting_queue:
            return
        num_running = len(running_batch.reqs) if running_batch is not None else 0
        bounds: tuple[int | None, float] = (None, math.inf)
        # NOTE: deferred requests are moved behind the order afterwards, so the
        # adder may reach past the policy's head: then the whole order counts.
        if self.head_bounds is not None and not (self.gate is not None and any(map(self.gate.holds, waiting_queue))):
            bounds = self.head_bounds(running_batch)
        positions = self._decide(waiting_queue, sync.rows, clock, num_running, bounds)
        if self.tracker is not None:
            head = [waiting_queue[i] for i in positions[:HEAD_RECHECK].tolist()]
            changed = self.tracker.recheck(head)
            if changed:  # an eviction shortened a hit near the front
                for req in changed:
                    self.store.set_cached(req)
                positions = self._decide(waiting_queue, sync.rows, clock, num_running, bounds)
        waiting_queue[:] = [waiting_queue[i] for i in positions.tolist()]  # NOTE: in place: the scheduler holds it
        self.store.remember(waiting_queue, sync.rows[positions])

    def _decide(self, waiting_queue: list[Any], rows: np.ndarray, clock: int,
                num_running: int, bounds: tuple[int | None, float]) -> np.ndarray:
        """Queue positions, best first, from the policy."""
        # NOTE: only called with an order policy (``_apply_order``); ``_columnar``: it ranks columns.
        now = time.perf_counter()
        admit_limit, budget = bounds
        if self._columnar:
            columns = self.store.columns(rows, now=now, processed_tokens=clock, num_running=num_running,
                                         admit_limit=admit_limit, prefill_budget_tokens=budget)
            positions = np.asarray(cast(RanksColumns, self.order_policy).rank(columns))
            check_ranking(len(waiting_queue), positions)
            return positions
        queue = QueueView(requests=self.store.views(waiting_queue, rows), now=now,
                          processed_tokens=clock, num_running=num_running,
                          admit_limit=admit_limit, prefill_budget_tokens=budget)
        decision = cast(SchedulingPolicy, self.order_policy).order(queue)
        check_permutation(queue, decision)
        position = {r.rid: i for i, r in enumerate(waiting_queue)}
        return np.fromiter((position[rid] for rid in decision.order), np.int64, len(waiting_queue))
