"""Admission inside SGLang's scheduler: the gate that applies an ``AdmissionPolicy``.

Hop 5 of docs/lifecycle.md: ``SwitchboardScheduler._add_request_to_queue``
asks ``AdmissionGate.on_arrival`` (before the request joins ``waiting_queue``
and before any KV allocation); deferred requests are revisited each prefill
pass (``revisit``), sorted last, and never offered to the PrefillAdder
(``GatedPrefillAdder``).

Counters on ``/metrics`` (per scheduler, summed by SGLang's multiprocess
registry): ``switchboard_admission_deferred_total`` (arrivals held),
``switchboard_admission_admitted_after_deferral_total`` (held, then admitted),
``switchboard_admission_rejected_total`` (answered 429: at arrival or after
being held). NOTE: a held request ends admitted, rejected, or aborted by its
client (SGLang's own abort counter), never in two of them.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from sglang.srt.managers import scheduler as sglang_scheduler
from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder

from policies.admission import AdmissionAction, AdmissionDecision, AdmissionPolicy, AdmissionView, check_decision
from server.sglang.cache.metrics import prometheus_counter
from server.sglang.middleware.retry_after import rejection_message
from server.sglang.scheduling.state import kind_record, own_kind_record
from server.sglang.scheduling.views import request_view


@dataclass(slots=True)
class Deferral:
    """The admission kind's record of a request (``kind_record``)."""

    deferred: bool = False
    """Admission defers it (it waits, sorted last, and is re-asked each pass)."""


def is_deferred(req: Any) -> bool:
    """Whether admission defers ``req`` (its ``Deferral``)."""
    record = kind_record(req, Deferral)
    return record is not None and record.deferred


class AdmissionGate:
    """Applies an ``AdmissionPolicy`` to one scheduler's requests."""

    def __init__(self, scheduler: Any, policy: AdmissionPolicy) -> None:
        self.scheduler = scheduler
        self.policy = policy
        self._counters = {name: prometheus_counter(f"switchboard_admission_{name}", doc) for name, doc in (
            ("deferred", "Arriving requests admission held (deferred)"),
            ("admitted_after_deferral", "Held requests admission later admitted"),
            ("rejected", "Requests admission answered 429 + Retry-After (at arrival or while held)"))}

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
        decision = check_decision(self.policy.needs, self.policy.decide(self.view(req)))
        if decision.action is AdmissionAction.REJECT:
            self.reject(req, decision)
            return False
        deferred = decision.action is AdmissionAction.DEFER
        own_kind_record(req, Deferral).deferred = deferred
        if deferred:
            self._counters["deferred"].inc()
        return True

    def holds(self, req: Any) -> bool:
        """``GatesArrival``: whether ``req`` waits deferred."""
        return is_deferred(req)

    def revisit(self, waiting_queue: list[Any]) -> None:
        """Offer each deferred request to the policy again, oldest first."""
        if not self.policy.needs.defers:
            return
        for req in [r for r in waiting_queue if is_deferred(r)]:
            decision = self.policy.decide(self.view(req))
            if decision.action is AdmissionAction.ADMIT:
                own_kind_record(req, Deferral).deferred = False
                self._counters["admitted_after_deferral"].inc()
            elif decision.action is AdmissionAction.REJECT:
                waiting_queue.remove(req)
                self.reject(req, decision)
                self.scheduler._release_aborted_request(req)

    def adder_class(self, base: type) -> type:
        """The prefill walk stops at deferred requests (``WrapsPrefillAdder``)."""
        # NOTE: `type`, as WrapsPrefillAdder has it: mypy does not take `type[PrefillAdder]`
        # (SGLang's class is Any here) for the Hashable argument of a functools.cache function.
        return gated_adder(base)

    def reject(self, req: Any, decision: AdmissionDecision) -> None:
        """Answer ``req`` with 429 + Retry-After; the caller frees what it holds."""
        self._counters["rejected"].inc()
        reason = {
            "type": "abort",
            "status_code": HTTPStatus.TOO_MANY_REQUESTS,
            "message": rejection_message(decision),
        }
        self.scheduler.send_abort_output(sglang_scheduler._make_abort_req(req, reason), req)


@functools.cache
def gated_adder(base: type[PrefillAdder]) -> type[PrefillAdder]:
    class GatedPrefillAdder(base):
        """Stops the prefill walk at the first deferred request (they sort last)."""

        def add_one_req(self, req: Any, has_chunked_req: bool, truncation_align_size: Any) -> Any:
            if is_deferred(req):
                return AddReqResult.OTHER
            return super().add_one_req(req, has_chunked_req, truncation_align_size)

    return GatedPrefillAdder
