"""Admission: admit, defer or reject a request as it arrives.

Contract (the host's side):
  * Every new request (never a retracted one) is offered to ``decide`` once on
    arrival, before it enters the waiting queue and before any KV allocation.
  * ``ADMIT``: the request joins the waiting queue.
  * ``REJECT``: the request is answered at once with HTTP 429 and a
    ``Retry-After`` header of ``retry_after_s`` (rounded up to whole seconds);
    nothing of it stays behind.
  * ``DEFER``: the request waits (it is not prefilled) and is offered to
    ``decide`` again at each scheduling pass until it is admitted or rejected.

Contract (the policy's side): ``decide`` is deterministic given the view,
and answers ``DEFER`` only if its ``needs`` say it may (``AdmissionNeeds``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from policies.views import RequestView


class AdmissionAction(enum.Enum):
    """What to do with an arriving request."""

    ADMIT = "admit"
    DEFER = "defer"
    REJECT = "reject"


@dataclass(frozen=True, slots=True)
class AdmissionView:
    """An arriving (or deferred) request and the load it arrives into."""

    request: RequestView
    """The request to decide on."""
    now: float
    """Host time, in seconds."""
    num_waiting: int
    """Requests in the waiting queue, not counting this one."""
    num_running: int
    """Requests currently decoding."""
    num_deferred: int = 0
    """Requests deferred by admission, not counting this one."""
    kv_capacity_tokens: int = 0
    """Total KV-cache slots of the pool."""
    kv_free_tokens: int = 0
    """Slots free right now (evictable cache not counted as free)."""


@dataclass(frozen=True, slots=True)
class AdmissionDecision:
    """An admission decision."""

    action: AdmissionAction
    retry_after_s: float = 0.0
    """For ``REJECT``: when the client should retry, in seconds."""
    reason: str = ""
    """Human-readable cause, returned to the client on ``REJECT``."""


ADMIT = AdmissionDecision(AdmissionAction.ADMIT)


@dataclass(frozen=True)
class AdmissionNeeds:
    """What an admission policy needs from its host.

    NOTE: the one place a host learns a policy's optional needs (its
    ``needs`` attribute)."""

    defers: bool = True
    """The policy may answer ``DEFER``: the host keeps deferred requests out
    of prefill and re-offers them every pass. ``False`` lets the host skip
    that re-offer; a ``DEFER`` from such a policy is a contract violation the
    host raises on."""


@runtime_checkable
class AdmissionPolicy(Protocol):
    """Decides whether an arriving request may join the waiting queue."""

    needs: AdmissionNeeds
    """What the policy needs from its host (``AdmissionNeeds``)."""

    def decide(self, view: AdmissionView) -> AdmissionDecision:
        """Admit, defer or reject ``view.request`` (see module docs)."""
        ...


def check_decision(needs: AdmissionNeeds, decision: AdmissionDecision) -> AdmissionDecision:
    """Return ``decision``, or raise ``ValueError`` if its policy's ``needs``
    forbid it. NOTE: hosts call this on every decision; a host that skips
    re-offering (``defers=False``) would otherwise strand a deferred request."""
    if decision.action is AdmissionAction.DEFER and not needs.defers:
        raise ValueError("admission policy answered DEFER but its needs say defers=False")
    return decision
