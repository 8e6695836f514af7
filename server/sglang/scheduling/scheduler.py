"""Scheduler-side seam: binds scheduling and admission policies to SGLang's scheduler.

Imported only inside SGLang processes (it imports SGLang). The plugin REPLACEs
``sglang.srt.managers.scheduler.Scheduler`` with the class made by
``scheduler_class``; SGLang's ``run_scheduler_process`` looks the class up at
call time, so every scheduler rank runs it.

Where each kind decides (hop numbers of docs/lifecycle.md):
  * admission, hop 5: ``_add_request_to_queue`` (every new request, before it
    joins ``waiting_queue`` and before any KV allocation; ``gate.py``);
    deferred requests are revisited in ``calc_priority`` and never offered to
    the PrefillAdder.
  * scheduling, hop 6: ``SchedulePolicy.calc_priority`` (each prefill pass;
    ``ordering.py``); for a diffusion LM under a diffusion policy, hop 6d: the
    dLLM round (``_fetch_waiting_reqs`` / ``_process_dllm_batches``; ``dllm.py``).
  * gap recompute, hop 7 (``+cache=penelope``): ``gap_prefill.py``.
"""

from __future__ import annotations

import logging
import math
import time
from http import HTTPStatus
from typing import Any

from sglang.srt.managers import scheduler as sglang_scheduler
from sglang.srt.managers.schedule_policy import PrefillAdder

from policies.admission import AdmissionPolicy
from policies.feedback import EndsSessions
from policies.scheduling import SchedulingPolicy
from server.sglang.cache.gap_prefill import GapRecomputeCounter, gap_prefill_adder
from server.sglang.scheduling.capture import DenoiseHiddenCapture, HiddenStateCapture, PromptEmbedding
from server.sglang.scheduling.dllm import DllmRounds
from server.sglang.scheduling.feedback import FinishReporter, streamer_class
from server.sglang.scheduling.gate import AdmissionGate, gated_adder
from server.sglang.scheduling.ordering import SwitchboardSchedulePolicy
from server.sglang.scheduling.views import stamp_arrival

log = logging.getLogger("switchboard.scheduler")

#: Set on a ``Req`` once its arrival checks ran (a re-queued request is not re-checked).
CHECKED_ATTR = "_switchboard_checked"
#: The client's ``max_tokens``, before SGLang clips it to the memory budget.
REQUESTED_MAX_NEW_ATTR = "_switchboard_requested_max_new_tokens"


def kv_fit_error(req: Any, capacity: int) -> str | None:
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


def install_seams(scheduler: Any, order: SchedulingPolicy | None, admission: AdmissionPolicy | None) -> None:
    """Give a freshly initialised scheduler Switchboard's per-process state and
    its schedule policy (the seam), after SGLang's ``init_schedule_policy``."""
    s = scheduler
    # NOTE: our own prefill-token clock. SGLang's processed_tokens_counter also
    # grows on decode steps (a decode batch keeps the extend_num_tokens of its
    # last prefill), so it is no token clock of prefill work.
    s._switchboard_prefill_tokens = 0
    layer = order.needs.hidden_state_layer if order is not None else None
    s._switchboard_capture = (HiddenStateCapture(s.tp_worker.model_runner.model, layer)
                              if layer is not None else None)
    s._switchboard_embedding = (PromptEmbedding(s.tp_worker.model_runner.model, s.tp_size)
                                if order is not None and order.needs.prompt_embedding else None)
    s._switchboard_gate = AdmissionGate(s, admission) if admission else None
    # NOTE: a diffusion policy orders dLLM rounds, not the prefill queue (args.py
    # refuses it for an autoregressive model, so dllm_config is set here).
    diffusion = order is not None and order.needs.diffusion
    s._switchboard_rounds = DllmRounds(s, order) if diffusion and s.dllm_config is not None else None
    s._switchboard_denoise_capture = (DenoiseHiddenCapture(s.tp_worker.model_runner.model)
                                      if s._switchboard_rounds is not None and order.needs.denoise_hidden_state
                                      else None)
    if diffusion:
        order = None
    # NOTE: gap recompute whenever the cache can hold gaps (+cache=penelope)
    s._switchboard_gaps = GapRecomputeCounter() if hasattr(s.tree_cache, "gap_at") else None
    s.policy = SwitchboardSchedulePolicy(
        s.schedule_policy, s.tree_cache, s.enable_hierarchical_cache,
        s.enable_priority_scheduling, s.schedule_low_priority_values_first,
        order=order, gate=s._switchboard_gate,
        prefill_clock=lambda: s._switchboard_prefill_tokens,
        head_bounds=lambda running_batch: head_bounds(s, running_batch),
    )
    if s.policy._columnar:
        # NOTE: not a size limit (no fallback at any queue length), but said once
        log.info("switchboard: %s ranks queue columns; its full rules place the head this "
                 "pass's PrefillAdder can reach (<= %d prefill tokens, <= allocatable requests), "
                 "the rest of the queue follows its base order", type(order).__name__,
                 max(int(s.max_prefill_tokens), int(s.chunked_prefill_size or 0)))


def admit_on_arrival(scheduler: Any, req: Any) -> bool:
    """Arrival checks, before any KV allocation; ``False`` = answered already."""
    error = kv_fit_error(req, int(scheduler.max_total_num_tokens))
    if error is not None:
        reason = {"type": "abort", "status_code": HTTPStatus.BAD_REQUEST, "message": error}
        scheduler.send_abort_output(sglang_scheduler._make_abort_req(req, reason), req)
        return False
    gate = scheduler._switchboard_gate
    return gate is None or gate.on_arrival(req)


def scheduler_class(order: SchedulingPolicy | None, admission: AdmissionPolicy | None,
                    feedback_log: str | None = None) -> type:
    """A subclass of SGLang's ``Scheduler`` bound to the chosen policies; each
    override calls SGLang's own method and one function of this module."""
    base = sglang_scheduler.Scheduler
    # NOTE: one scheduler per process, so one reporter per process.
    reporter = FinishReporter([p for p in (order, admission) if p is not None], feedback_log)
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
            install_seams(self, order, admission)

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
            if self._switchboard_denoise_capture is not None and mode.is_dllm_extend():
                self._switchboard_denoise_capture.attach(batch.reqs)
            return result

        def get_prefill_adder_class(self) -> type[PrefillAdder]:
            adder = super().get_prefill_adder_class()
            if self._switchboard_gaps is not None:
                adder = gap_prefill_adder(adder)
            return gated_adder(adder) if self._switchboard_gate is not None else adder

        def init_req_max_new_tokens(self, req: Any) -> None:
            if not hasattr(req, REQUESTED_MAX_NEW_ATTR):
                setattr(req, REQUESTED_MAX_NEW_ATTR, req.sampling_params.max_new_tokens)
            super().init_req_max_new_tokens(req)

        def _fetch_waiting_reqs(self) -> None:
            if self._switchboard_rounds is None:
                super()._fetch_waiting_reqs()
            else:
                self._switchboard_rounds.fetch()

        def _process_dllm_batches(self, adder: Any, running_batch: Any) -> Any:
            if self._switchboard_rounds is None:
                return super()._process_dllm_batches(adder, running_batch=running_batch)
            return self._switchboard_rounds.walk(adder, running_batch)

        def get_new_batch_dllm(self, running_batch: Any) -> Any:
            batch = super().get_new_batch_dllm(running_batch)
            if batch is not None and self._switchboard_rounds is not None:
                self._switchboard_rounds.after_round(batch.reqs)
            return batch

        def _add_request_to_queue(self, req: Any, is_retracted: bool = False) -> None:
            stamp_arrival(req, self._switchboard_prefill_tokens)
            if self._switchboard_rounds is not None:
                self._switchboard_rounds.on_arrival(req)
            self.policy.forget(req)  # NOTE: a re-queued request is read afresh
            if not is_retracted and not getattr(req, CHECKED_ATTR, False):
                setattr(req, CHECKED_ATTR, True)
                if not admit_on_arrival(self, req):
                    self._release_aborted_request(req)
                    return
                if self._switchboard_embedding is not None:
                    # NOTE: before the request is first ranked (LEAP orders fresh arrivals)
                    self._switchboard_embedding.attach(req)
            super()._add_request_to_queue(req, is_retracted)

    return SwitchboardScheduler
