"""``+admission=max_queue``: bound the waiting queue; reject past it with 429."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from policies.admission import ADMIT, AdmissionAction, AdmissionDecision, AdmissionNeeds, AdmissionView


@dataclass(frozen=True)
class MaxQueuePolicy:
    """Reject a request that would make more than ``max_waiting`` wait.

    Unlike SGLang's ``--max-queued-requests`` (503, no Retry-After), the
    rejection is a 429 with ``Retry-After: retry_after_s``.
    """

    needs: ClassVar[AdmissionNeeds] = AdmissionNeeds(defers=False)

    max_waiting: int = 64
    """Most requests that may wait for prefill at once (deferred ones count)."""
    retry_after_s: float = 1.0
    """Retry-After sent with each rejection, in seconds."""

    def __post_init__(self) -> None:
        if self.max_waiting < 0:
            raise ValueError(f"max_waiting must be >= 0, got {self.max_waiting}")
        if self.retry_after_s < 0:
            raise ValueError(f"retry_after_s must be >= 0, got {self.retry_after_s}")

    def decide(self, view: AdmissionView) -> AdmissionDecision:
        waiting = view.num_waiting + view.num_deferred
        if waiting < self.max_waiting:
            return ADMIT
        return AdmissionDecision(
            AdmissionAction.REJECT,
            retry_after_s=self.retry_after_s,
            reason=f"queue full: {waiting} requests waiting (max_waiting={self.max_waiting})",
        )
