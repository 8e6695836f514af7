"""The scheduler subclass: a fixed dispatcher of SGLang's scheduler events.

Imported only inside SGLang processes (it imports SGLang). The plugin REPLACEs
``sglang.srt.managers.scheduler.Scheduler`` with the class made by
``scheduler_class``; SGLang's ``run_scheduler_process`` looks the class up at
call time, so every scheduler rank runs it.

Each override calls SGLang's own method and forwards one event
(``events.py``) to the seams the chosen kinds' bindings subscribed
(``SchedulerParts.seams``): arrival checks and admission at hop 5 of
docs/lifecycle.md (``gate.py``), the queue order at hop 6 (``ordering.py``),
the dLLM rounds at hop 6d (``dllm.py``), the prefill walk at hop 7
(``gap_prefill.py``), feature captures around batches (``capture.py``) and
finished requests (``feedback.py``). No kind is named here; what is always on
(the KV-fit check, the prefill-token clock, arrival order) is.
"""

from __future__ import annotations

import logging
import math
import time
from http import HTTPStatus
from typing import Any

from sglang.srt.managers import scheduler as sglang_scheduler
from sglang.srt.managers.schedule_policy import PrefillAdder

from policies.feedback import EndsSessions
from server.sglang.launch.binding import SchedulerParts
from server.sglang.scheduling.events import (
    GatesArrival,
    HostsRounds,
    LimitsChunk,
    OnAdmitted,
    OnBatchFinished,
    OnBatchFormed,
    OnQueued,
    OnQueueOrdered,
    WrapsPrefillAdder,
    one,
)
from server.sglang.scheduling.feedback import FinishReporter, streamer_class
from server.sglang.scheduling.hook_clock import HOOK_CLOCK
from server.sglang.scheduling.ordering import SwitchboardSchedulePolicy
from server.sglang.scheduling.state import STATE_ATTR, SchedulerState, scheduler_state, state_of
from server.sglang.scheduling.views import stamp_arrival

log = logging.getLogger("switchboard.scheduler")


def kv_fit_error(req: Any, capacity: int) -> str | None:
    """Why ``req`` can never fit a KV pool of ``capacity`` tokens, or ``None``.

    NOTE: always on. SGLang checks prompt + max_tokens against the context
    length only; against a smaller pool it silently clips ``max_new_tokens``
    (``init_req_max_new_tokens``), so the client gets fewer tokens than it
    asked for with no error. The client's own value is checked here.
    """
    prompt = len(req.origin_input_ids)
    state = state_of(req)
    requested = state.requested_max_new_tokens if state.max_new_recorded else req.sampling_params.max_new_tokens
    max_new = requested or 0
    if capacity <= 0 or prompt + max_new <= capacity:
        return None
    return (f"Request needs {prompt + max_new} KV-cache tokens ({prompt} prompt + {max_new} max_tokens) "
            f"but the server's KV pool holds at most {capacity}; lower max_tokens or shorten the prompt.")


def head_bounds(scheduler: Any, running_batch: Any) -> tuple[int | None, float]:
    """How far into the order this pass's PrefillAdder can get at most.

    NOTE: the adder stops at the first request it cannot take (batch full:
    ``get_num_allocatable_reqs``; token budget: SGLang's ``max_prefill_tokens``,
    or the chunk size when larger). It walks past requests only when it skips
    them (LoRA capacity, storage prefetch, priority preemption), so with those
    features on, no bound is given and the policy orders the whole queue.
    """
    s = scheduler
    if (s.enable_lora or s.enable_priority_preemption
            or getattr(s, "enable_hicache_storage", False) or getattr(s, "enable_lmcache", False)):
        return None, math.inf
    running_bs = len(running_batch.reqs) if running_batch is not None else 0
    limit = max(0, int(s.get_num_allocatable_reqs(running_bs, running_batch=running_batch)))
    budget = max(int(s.max_prefill_tokens), int(s.chunked_prefill_size or 0))
    return limit, float(budget) if budget > 0 else math.inf


def install_seams(scheduler: Any, parts: SchedulerParts) -> SchedulerState:
    """Give a freshly initialised scheduler Switchboard's per-process state: the
    seams the bindings subscribed, and its schedule policy (after SGLang's
    ``init_schedule_policy``)."""
    s = scheduler
    seams = [seam for factory in parts.seams if (seam := factory(s)) is not None]
    state = SchedulerState(
        seams=seams, gate=one(seams, GatesArrival, "arrival"), rounds=one(seams, HostsRounds, "dLLM round"),
        on_queued=[x for x in seams if isinstance(x, OnQueued)],
        on_admitted=[x for x in seams if isinstance(x, OnAdmitted)],
        on_batch_formed=[x for x in seams if isinstance(x, OnBatchFormed)],
        on_batch_finished=[x for x in seams if isinstance(x, OnBatchFinished)],
        adders=[x for x in seams if isinstance(x, WrapsPrefillAdder)],
        chunk_limits=[x for x in seams if isinstance(x, LimitsChunk)],
        on_queue_ordered=[x for x in seams if isinstance(x, OnQueueOrdered)])
    setattr(s, STATE_ATTR, state)
    order = parts.order
    s.policy = SwitchboardSchedulePolicy(
        s.schedule_policy, s.tree_cache, s.enable_hierarchical_cache,
        s.enable_priority_scheduling, s.schedule_low_priority_values_first,
        order=order, gate=state.gate, chunk_limits=state.chunk_limits, ordered=state.on_queue_ordered,
        prefill_clock=lambda: state.prefill_tokens,
        head_bounds=lambda running_batch: head_bounds(s, running_batch),
    )
    if s.policy._columnar:
        # NOTE: not a size limit (no fallback at any queue length), but said once
        log.info("switchboard: %s ranks queue columns; its full rules place the head this "
                 "pass's PrefillAdder can reach (<= %d prefill tokens, <= allocatable requests), "
                 "the rest of the queue follows its base order", type(order).__name__,
                 max(int(s.max_prefill_tokens), int(s.chunked_prefill_size or 0)))
    return state


def admit_on_arrival(scheduler: Any, req: Any) -> bool:
    """Arrival checks, before any KV allocation; ``False`` = answered already."""
    error = kv_fit_error(req, int(scheduler.max_total_num_tokens))
    if error is not None:
        reason = {"type": "abort", "status_code": HTTPStatus.BAD_REQUEST, "message": error}
        scheduler.send_abort_output(sglang_scheduler._make_abort_req(req, reason), req)
        return False
    gate = scheduler_state(scheduler).gate
    return gate is None or gate.on_arrival(req)


def scheduler_class(parts: SchedulerParts, feedback_log: str | None = None) -> type:
    """A subclass of SGLang's ``Scheduler`` dispatching its events to ``parts``'
    seams; each override calls SGLang's own method and forwards one event."""
    base: type = sglang_scheduler.Scheduler
    # NOTE: one scheduler per process, so one reporter per process.
    reporter = FinishReporter(parts.policies, feedback_log)
    session_policies = [p for p in parts.policies if isinstance(p, EndsSessions)]

    class SwitchboardScheduler(base):
        """SGLang's scheduler, dispatching its events to Switchboard's seams."""

        def get_output_streamer_class(self) -> type:
            base_streamer = super().get_output_streamer_class()
            return streamer_class(base_streamer, reporter) if reporter.active else base_streamer

        def send_abort_output(self, abort_req: Any, req: Any) -> None:
            super().send_abort_output(abort_req, req)
            t = time.perf_counter()
            reporter.report(req, aborted=True)
            HOOK_CLOCK.add("finished", time.perf_counter() - t)

        def get_next_batch_to_run(self, running_batch: Any, last_batch: Any) -> Any:
            HOOK_CLOCK.boundary()  # NOTE: one boundary per scheduler iteration (SGLang's event loops)
            plan = super().get_next_batch_to_run(running_batch, last_batch)
            HOOK_CLOCK.picked(plan.batch_to_run)
            return plan

        def close_session(self, recv_req: Any) -> None:
            super().close_session(recv_req)
            for policy in session_policies:
                policy.end_session(recv_req.session_id, time.perf_counter())

        def init_schedule_policy(self) -> None:
            super().init_schedule_policy()
            install_seams(self, parts)

        def run_batch(self, batch: Any, pp_proxy_tensors: Any = None) -> Any:
            t = time.perf_counter()
            state = scheduler_state(self)
            mode = batch.forward_mode
            prefill = mode.is_extend() and not mode.is_target_verify()
            if prefill and batch.extend_num_tokens:
                # NOTE: our own prefill-token clock. SGLang's processed_tokens_counter
                # also grows on decode steps, so it is no token clock of prefill work.
                state.prefill_tokens += batch.extend_num_tokens
            for formed in state.on_batch_formed:
                formed.batch_formed(batch, prefill)
            HOOK_CLOCK.add("batch_formed", time.perf_counter() - t)
            result = super().run_batch(batch, pp_proxy_tensors)
            t = time.perf_counter()
            for finished in state.on_batch_finished:
                finished.batch_finished(batch, prefill)
            HOOK_CLOCK.add("batch_finished", time.perf_counter() - t)
            return result

        def get_prefill_adder_class(self) -> type[PrefillAdder]:
            adder: type[PrefillAdder] = super().get_prefill_adder_class()
            for seam in scheduler_state(self).adders:  # NOTE: binding order: the last wraps outermost
                adder = seam.adder_class(adder)
            return adder

        def init_req_max_new_tokens(self, req: Any) -> None:
            state = state_of(req)
            if not state.max_new_recorded:
                state.max_new_recorded = True
                state.requested_max_new_tokens = req.sampling_params.max_new_tokens
            super().init_req_max_new_tokens(req)

        def _fetch_waiting_reqs(self) -> None:
            rounds = scheduler_state(self).rounds
            if rounds is None:
                super()._fetch_waiting_reqs()
            else:
                t = time.perf_counter()
                rounds.fetch()
                HOOK_CLOCK.add("dllm_rounds", time.perf_counter() - t)

        def _process_dllm_batches(self, adder: Any, running_batch: Any) -> Any:
            rounds = scheduler_state(self).rounds
            if rounds is None:
                return super()._process_dllm_batches(adder, running_batch=running_batch)
            return rounds.walk(adder, running_batch)

        def get_new_batch_dllm(self, running_batch: Any) -> Any:
            batch = super().get_new_batch_dllm(running_batch)
            rounds = scheduler_state(self).rounds
            if batch is not None and rounds is not None:
                t = time.perf_counter()
                rounds.after_round(batch.reqs)
                HOOK_CLOCK.add("dllm_rounds", time.perf_counter() - t)
            return batch

        def _add_request_to_queue(self, req: Any, is_retracted: bool = False) -> None:
            t = time.perf_counter()
            admitted = self._switchboard_arrival(req, is_retracted)
            HOOK_CLOCK.add("arrival", time.perf_counter() - t)
            if admitted:
                super()._add_request_to_queue(req, is_retracted)

        def _switchboard_arrival(self, req: Any, is_retracted: bool) -> bool:
            """Switchboard's part of queueing ``req``; ``False``: answered and released already."""
            state = scheduler_state(self)
            stamp_arrival(req, state.prefill_tokens)
            for seam in state.on_queued:
                seam.on_queued(req)
            self.policy.forget(req)  # NOTE: a re-queued request is read afresh
            request = state_of(req)
            if not is_retracted and not request.checked:
                request.checked = True
                if not admit_on_arrival(self, req):
                    self._release_aborted_request(req)
                    return False
                for admitted in state.on_admitted:
                    admitted.on_admitted(req)  # NOTE: before the request is first ranked
            return True

    return SwitchboardScheduler
