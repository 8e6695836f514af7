"""The admission seam, as the server's ``AdmissionGate`` applies it.

Every new request (never a retracted one) is offered to ``decide`` once on
arrival, before it enters the waiting queue: ADMIT queues it, REJECT turns it
away, DEFER queues it flagged. Deferred requests are offered again at every
scheduling pass (oldest first), sort last and stop the prefill walk.

The admission kind's seam on the simulator's arrival event
(``events.GatesArrival``); ``bindings.py`` puts it on the replica's record.
"""

from __future__ import annotations

from collections.abc import Sized
from typing import TYPE_CHECKING, Protocol

from bench.sim.request import SimRequest
from policies.admission import AdmissionAction, AdmissionPolicy, AdmissionView, check_decision
from policies.feedback import ObservesFinished

if TYPE_CHECKING:
    from bench.sim.binding import SimParts


class _Host(Protocol):
    """What the gate reads of the simulator."""

    now: float

    @property
    def queue(self) -> Sized: ...

    @property
    def running(self) -> Sized: ...

    @property
    def free_tokens(self) -> int: ...

    @property
    def capacity(self) -> int: ...


class AdmissionGate:
    """Applies an ``AdmissionPolicy`` to one simulator's requests."""

    def __init__(self, policy: AdmissionPolicy) -> None:
        self.policy = policy
        self.num_deferred = 0

    def view(self, host: _Host, r: SimRequest, in_queue: bool) -> AdmissionView:
        deferred = self.num_deferred - (1 if r.deferred else 0)
        return AdmissionView(
            request=r.make_view(), now=host.now,
            num_waiting=len(host.queue) - (1 if in_queue else 0) - deferred,
            num_running=len(host.running),
            num_deferred=deferred, kv_capacity_tokens=host.capacity, kv_free_tokens=host.free_tokens)

    def on_arrival(self, host: _Host, r: SimRequest) -> str | None:
        """Decide on a new request; the rejection reason, or None if it may queue."""
        decision = check_decision(self.policy.needs, self.policy.decide(self.view(host, r, in_queue=False)))
        if decision.action is AdmissionAction.REJECT:
            return decision.reason or "rejected by admission"
        if decision.action is AdmissionAction.DEFER:
            r.deferred = True
            self.num_deferred += 1
        return None

    def revisit(self, host: _Host, waiting: list[SimRequest]) -> list[tuple[SimRequest, str]]:
        """Offer each deferred request again; return the ones now rejected."""
        rejected: list[tuple[SimRequest, str]] = []
        if not self.policy.needs.defers:
            return rejected
        for r in [r for r in waiting if r.deferred]:
            decision = self.policy.decide(self.view(host, r, in_queue=True))
            if decision.action is AdmissionAction.DEFER:
                continue
            r.deferred = False
            self.num_deferred -= 1
            if decision.action is AdmissionAction.REJECT:
                rejected.append((r, decision.reason or "rejected by admission"))
        return rejected


def add_gate(parts: SimParts, policy: AdmissionPolicy) -> None:
    """Put ``policy``'s gate on ``parts`` (the admission binding's ``attach``; tests' too)."""
    parts.seams.append(AdmissionGate(policy))
    if isinstance(policy, ObservesFinished):
        parts.observers.append(policy)  # NOTE: after the order's feedback, as the server feeds them
