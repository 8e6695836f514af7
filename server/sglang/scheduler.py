"""Scheduler-side seam: binds scheduling and admission policies to SGLang's scheduler.

Imported only inside SGLang processes (it imports SGLang). The plugin REPLACEs
``sglang.srt.managers.scheduler.Scheduler`` with the class made by
``scheduler_class``; SGLang's ``run_scheduler_process`` looks the class up at
call time, so every scheduler rank runs it.

Where each kind decides (hop numbers of docs/lifecycle.md):
  * admission, hop 5: ``_add_request_to_queue`` (every new request, before it
    joins ``waiting_queue`` and before any KV allocation); deferred requests
    are revisited in ``calc_priority`` and never offered to the PrefillAdder.
  * scheduling, hop 6: ``SchedulePolicy.calc_priority`` (each prefill pass).
"""

from __future__ import annotations

import functools
import math
import time
from http import HTTPStatus
from typing import Any, Callable, Optional

import numpy as np
from sglang.srt.managers import scheduler as sglang_scheduler
from sglang.srt.managers.schedule_policy import (
    AddReqResult,
    CacheAwarePolicy,
    PrefillAdder,
    SchedulePolicy,
)

from policies.admission import AdmissionAction, AdmissionDecision, AdmissionPolicy, AdmissionView
from policies.feedback import EndsSessions
from policies.scheduling import QueueView, SchedulingPolicy, check_permutation
from policies.scheduling.columns import RanksColumns, check_ranking
from server.sglang.admission import rejection_message
from server.sglang.capture import HiddenStateCapture
from server.sglang.feedback import FinishReporter, streamer_class
from server.sglang.gap_prefill import GapRecomputeCounter, gap_chunk_limit, gap_prefill_adder
from server.sglang.matching import MatchTracker
from server.sglang.queue_columns import QueueColumnStore
from server.sglang.views import request_view, stamp_arrival

#: Requests at the front of each decided order whose cache hit is re-checked
#: before the order is used (evictions only show there; see matching.py).
HEAD_RECHECK = 16
#: Set on a ``Req`` while admission defers it.
DEFERRED_ATTR = "_switchboard_deferred"
#: Set on a ``Req`` once its arrival checks ran (a re-queued request is not re-checked).
CHECKED_ATTR = "_switchboard_checked"
#: The client's ``max_tokens``, before SGLang clips it to the memory budget.
REQUESTED_MAX_NEW_ATTR = "_switchboard_requested_max_new_tokens"


def kv_fit_error(req: Any, capacity: int) -> Optional[str]:
    """Why ``req`` can never fit a KV pool of ``capacity`` tokens, or ``None``.

    NOTE: always on. SGLang checks prompt + max_tokens against the context
    length only; against a smaller pool it silently clips ``max_new_tokens``
    (``init_req_max_new_tokens``), so the client gets fewer tokens than it
    asked for with no error. The client's own value is checked here.
    """
    prompt = len(req.origin_input_ids)
    requested = getattr(req, REQUESTED_MAX_NEW_ATTR, req.sampling_params.max_new_tokens)
    max_new = requested or 0
    if capacity <= 0 or prompt + max_new <= capacity:
        return None
    return (f"Request needs {prompt + max_new} KV-cache tokens ({prompt} prompt + {max_new} max_tokens) "
            f"but the server's KV pool holds at most {capacity}; lower max_tokens or shorten the prompt.")


def is_deferred(req: Any) -> bool:
    return getattr(req, DEFERRED_ATTR, False)


class AdmissionGate:
    """Applies an ``AdmissionPolicy`` to one scheduler's requests."""

    def __init__(self, scheduler: Any, policy: AdmissionPolicy) -> None:
        self.scheduler = scheduler
        self.policy = policy

    def view(self, req: Any) -> AdmissionView:
        s = self.scheduler
        queue = s.waiting_queue
        deferred = sum(1 for r in queue if is_deferred(r) and r is not req)
        waiting = sum(1 for r in queue if r is not req) - deferred
        allocator = s.token_to_kv_pool_allocator
        return AdmissionView(
            request=request_view(req),
            now=time.perf_counter(),
            num_waiting=waiting,
            num_deferred=deferred,
            num_running=len(s.running_batch.reqs),
            kv_capacity_tokens=int(getattr(s, "max_total_num_tokens", 0) or 0),
            kv_free_tokens=int(allocator.available_size()),
        )

    def on_arrival(self, req: Any) -> bool:
        """Decide on a new request; ``True`` if it may join the waiting queue."""
        decision = self.policy.decide(self.view(req))
        if decision.action is AdmissionAction.REJECT:
            self.reject(req, decision)
            return False
        setattr(req, DEFERRED_ATTR, decision.action is AdmissionAction.DEFER)
        return True

    def revisit(self, waiting_queue: list) -> None:
        """Offer each deferred request to the policy again, oldest first."""
        for req in [r for r in waiting_queue if is_deferred(r)]:
            decision = self.policy.decide(self.view(req))
            if decision.action is AdmissionAction.ADMIT:
                setattr(req, DEFERRED_ATTR, False)
            elif decision.action is AdmissionAction.REJECT:
                waiting_queue.remove(req)
                self.reject(req, decision)
                self.scheduler._release_aborted_request(req)

    def reject(self, req: Any, decision: AdmissionDecision) -> None:
        """Answer ``req`` with 429 + Retry-After; the caller frees what it holds."""
        reason = {
            "type": "abort",
            "status_code": HTTPStatus.TOO_MANY_REQUESTS,
            "message": rejection_message(decision),
        }
        self.scheduler.send_abort_output(sglang_scheduler._make_abort_req(req, reason), req)


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
                 *, order: Optional[SchedulingPolicy] = None,
                 gate: Optional[AdmissionGate] = None,
                 prefill_clock: Optional[Callable[[], int]] = None,
                 head_bounds: Optional[Callable[[Any], tuple[Optional[int], float]]] = None) -> None:
        # NOTE: with our own order we run SGLang's cache-aware (lpm) slot, so the
        # queue is prefix-matched each pass and the scheduler treats it as matched.
        super().__init__("lpm" if order is not None else policy, tree_cache,
                         enable_hierarchical_cache, enable_priority_scheduling,
                         schedule_low_priority_values_first)
        self.order_policy = order
        self.gate = gate
        self.prefill_clock = prefill_clock
        self.head_bounds = head_bounds
        """``running_batch -> (admit_limit, prefill_budget_tokens)`` of this pass."""
        self.store = QueueColumnStore()
        self._columnar = isinstance(order, RanksColumns) and not getattr(
            order, "needs_in_batch_duplicates", False)
        self.tracker: Optional[MatchTracker] = None
        # NOTE: no tracker when the policy reads no hits, or when SGLang's
        # in-batch rule re-matches the whole queue every pass anyway.
        if (order is not None and getattr(order, "uses_cache_hits", True)
                and not getattr(order, "needs_in_batch_duplicates", False)
                and not getattr(tree_cache, "disable", False)):
            self.tracker = MatchTracker(tree_cache)
            self.tracker.watch_tree()

    def _determine_active_policy(self, waiting_queue: list) -> Any:
        if self.order_policy is not None:
            # NOTE: no silent FCFS fallback for long queues (SGLang's > 128 rule):
            # the chosen policy decides for every queue length.
            return self.policy
        return super()._determine_active_policy(waiting_queue)

    def shortest_prefill_chunk_limit(self, chunked_req: Any, waiting_queue: list, budget: int,
                                     page_size: int) -> Optional[int]:
        limit = super().shortest_prefill_chunk_limit(chunked_req, waiting_queue, budget, page_size)
        gap = gap_chunk_limit(self.tree_cache, chunked_req)  # NOTE: the next gap ends the chunk
        if gap is None:
            return limit
        return gap if limit is None else min(gap, limit)

    def forget(self, req: Any) -> None:
        """``req`` (re-)enters the queue: drop what is kept about its last stay."""
        self.store.forget(req)
        if self.tracker is not None:
            self.tracker.forget(req.rid)

    def calc_priority(self, waiting_queue: list, running_batch: Any = None,
                      processed_tokens: int = 0) -> None:
        if self.gate is not None:
            self.gate.revisit(waiting_queue)
        if self.order_policy is None:
            super().calc_priority(waiting_queue, running_batch, processed_tokens)
        else:
            clock = self.prefill_clock() if self.prefill_clock is not None else processed_tokens
            self._apply_order(waiting_queue, running_batch, clock)
        if self.gate is not None:
            waiting_queue.sort(key=is_deferred)  # stable: deferred go last
            self.store.remember(None)  # NOTE: the rows no longer follow the queue

    def _apply_order(self, waiting_queue: list, running_batch: Any, clock: int) -> None:
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
        duplicates: set = set()
        if getattr(self.order_policy, "needs_in_batch_duplicates", False):
            # NOTE: SGLang's in-batch rule needs a full re-match of the queue.
            duplicates = self._compute_prefix_matches(waiting_queue, self.policy)
            for req in waiting_queue:
                self.store.set_cached(req)
        num_running = len(running_batch.reqs) if running_batch is not None else 0
        bounds: tuple[Optional[int], float] = (None, math.inf)
        # NOTE: deferred requests are moved behind the order afterwards, so the
        # adder may reach past the policy's head: then the whole order counts.
        if self.head_bounds is not None and not (self.gate is not None and any(map(is_deferred, waiting_queue))):
            bounds = self.head_bounds(running_batch)
        positions = self._decide(waiting_queue, sync.rows, duplicates, clock, num_running, bounds)
        if self.tracker is not None:
            head = [waiting_queue[i] for i in positions[:HEAD_RECHECK].tolist()]
            changed = self.tracker.recheck(head)
            if changed:  # an eviction shortened a hit near the front
                for req in changed:
                    self.store.set_cached(req)
                positions = self._decide(waiting_queue, sync.rows, duplicates, clock, num_running, bounds)
        waiting_queue[:] = [waiting_queue[i] for i in positions.tolist()]  # NOTE: in place: the scheduler holds it
        self.store.remember(waiting_queue, sync.rows[positions])

    def _decide(self, waiting_queue: list, rows: np.ndarray, duplicates: set, clock: int,
                num_running: int, bounds: tuple[Optional[int], float]) -> np.ndarray:
        """Queue positions, best first, from the policy."""
        now = time.perf_counter()
        admit_limit, budget = bounds
        if self._columnar:
            columns = self.store.columns(rows, now=now, processed_tokens=clock, num_running=num_running,
                                         admit_limit=admit_limit, prefill_budget_tokens=budget)
            positions = np.asarray(self.order_policy.rank(columns))
            check_ranking(len(waiting_queue), positions)
            return positions
        queue = QueueView(requests=self.store.views(waiting_queue, rows, duplicates), now=now,
                          processed_tokens=clock, num_running=num_running,
                          admit_limit=admit_limit, prefill_budget_tokens=budget)
        decision = self.order_policy.order(queue)  # type: ignore[union-attr]
        check_permutation(queue, decision)
        position = {r.rid: i for i, r in enumerate(waiting_queue)}
        return np.fromiter((position[rid] for rid in decision.order), np.int64, len(waiting_queue))


@functools.lru_cache(maxsize=None)
def _gated_adder(base: type[PrefillAdder]) -> type[PrefillAdder]:
    class GatedPrefillAdder(base):  # type: ignore[valid-type, misc]
        """Stops the prefill walk at the first deferred request (they sort last)."""

        def add_one_req(self, req: Any, has_chunked_req: bool, truncation_align_size: Any):
            if is_deferred(req):
                return AddReqResult.OTHER
            return super().add_one_req(req, has_chunked_req, truncation_align_size)

    return GatedPrefillAdder


def scheduler_class(order: Optional[SchedulingPolicy], admission: Optional[AdmissionPolicy],
                    feedback_log: Optional[str] = None) -> type:
    """A subclass of SGLang's ``Scheduler`` bound to the chosen policies."""
    base = sglang_scheduler.Scheduler
    # NOTE: one scheduler per process, so one reporter per process.
    reporter = FinishReporter([p for p in (order, admission) if p is not None], feedback_log)
    feature_layer = getattr(order, "hidden_state_layer", None)
    session_policies = [p for p in (order, admission) if isinstance(p, EndsSessions)]

    class SwitchboardScheduler(base):  # type: ignore[valid-type, misc]
        """SGLang's scheduler with Switchboard's scheduling and admission seams."""

        def get_output_streamer_class(self) -> type:
            base_streamer = super().get_output_streamer_class()
            return streamer_class(base_streamer, reporter) if reporter.active else base_streamer

        def send_abort_output(self, abort_req: Any, req: Any) -> None:
            super().send_abort_output(abort_req, req)
            reporter.report(req, aborted=True)

        def close_session(self, recv_req: Any) -> None:
            super().close_session(recv_req)
            for policy in session_policies:
                policy.end_session(recv_req.session_id, time.perf_counter())

        def init_schedule_policy(self) -> None:
            super().init_schedule_policy()
            # NOTE: our own prefill-token clock. SGLang's processed_tokens_counter
            # also grows on decode steps (a decode batch keeps the extend_num_tokens
            # of its last prefill), so it is no token clock of prefill work.
            self._switchboard_prefill_tokens = 0
            self._switchboard_capture = (
                HiddenStateCapture(self.tp_worker.model_runner.model, feature_layer)
                if feature_layer is not None else None)
            self._switchboard_gate = AdmissionGate(self, admission) if admission else None
            # NOTE: gap recompute whenever the cache can hold gaps (+cache=penelope)
            self._switchboard_gaps = GapRecomputeCounter() if hasattr(self.tree_cache, "gap_at") else None
            self.policy = SwitchboardSchedulePolicy(
                self.schedule_policy, self.tree_cache, self.enable_hierarchical_cache,
                self.enable_priority_scheduling, self.schedule_low_priority_values_first,
                order=order, gate=self._switchboard_gate,
                prefill_clock=lambda: self._switchboard_prefill_tokens,
                head_bounds=self._switchboard_head_bounds,
            )

        def _switchboard_head_bounds(self, running_batch: Any) -> tuple[Optional[int], float]:
            """How far into the order this pass's PrefillAdder can get at most.

            NOTE: the adder stops at the first request it cannot take (batch
            full: ``get_num_allocatable_reqs``; token budget: SGLang's
            ``max_prefill_tokens``, or the chunk size when larger). It walks past
            requests only when it skips them (LoRA capacity, storage prefetch,
            priority preemption), so with those features on, no bound is given
            and the policy orders the whole queue.
            """
            if (self.enable_lora or self.enable_priority_preemption
                    or getattr(self, "enable_hicache_storage", False) or getattr(self, "enable_lmcache", False)):
                return None, math.inf
            running_bs = len(running_batch.reqs) if running_batch is not None else 0
            limit = max(0, int(self.get_num_allocatable_reqs(running_bs, running_batch=running_batch)))
            budget = max(int(self.max_prefill_tokens), int(self.chunked_prefill_size or 0))
            return limit, float(budget) if budget > 0 else math.inf

        def run_batch(self, batch: Any, pp_proxy_tensors: Any = None) -> Any:
            mode = batch.forward_mode
            prefill = mode.is_extend() and not mode.is_target_verify()
            if prefill and batch.extend_num_tokens:
                self._switchboard_prefill_tokens += batch.extend_num_tokens
                if self._switchboard_gaps is not None:
                    self._switchboard_gaps.observe(batch)
            result = super().run_batch(batch, pp_proxy_tensors)
            if prefill and self._switchboard_capture is not None:
                self._switchboard_capture.attach(batch.reqs)
            return result

        def get_prefill_adder_class(self) -> type[PrefillAdder]:
            adder = super().get_prefill_adder_class()
            if self._switchboard_gaps is not None:
                adder = gap_prefill_adder(adder)
            return _gated_adder(adder) if self._switchboard_gate is not None else adder

        def init_req_max_new_tokens(self, req: Any) -> None:
            if not hasattr(req, REQUESTED_MAX_NEW_ATTR):
                setattr(req, REQUESTED_MAX_NEW_ATTR, req.sampling_params.max_new_tokens)
            super().init_req_max_new_tokens(req)

        def _add_request_to_queue(self, req: Any, is_retracted: bool = False) -> None:
            stamp_arrival(req, self._switchboard_prefill_tokens)
            self.policy.forget(req)  # NOTE: a re-queued request is read afresh
            if not is_retracted and not getattr(req, CHECKED_ATTR, False):
                setattr(req, CHECKED_ATTR, True)
                if not self._switchboard_admit_on_arrival(req):
                    self._release_aborted_request(req)
                    return
            super()._add_request_to_queue(req, is_retracted)

        def _switchboard_admit_on_arrival(self, req: Any) -> bool:
            """Arrival checks, before any KV allocation; ``False`` = answered already."""
            error = kv_fit_error(req, int(self.max_total_num_tokens))
            if error is not None:
                reason = {"type": "abort", "status_code": HTTPStatus.BAD_REQUEST, "message": error}
                self.send_abort_output(sglang_scheduler._make_abort_req(req, reason), req)
                return False
            gate = self._switchboard_gate
            return gate is None or gate.on_arrival(req)

    return SwitchboardScheduler
