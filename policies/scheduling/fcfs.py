"""``+policy=fcfs``: SGLang's default first-come-first-served order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from policies.scheduling import OrderDecision, QueueView, ordered_by


@dataclass(frozen=True)
class FcfsPolicy:
    """Arrival order. Inside SGLang this selects ``--schedule-policy fcfs``."""

    sglang_schedule_policy: ClassVar[str | None] = "fcfs"

    def order(self, queue: QueueView) -> OrderDecision:
        return ordered_by(queue, lambda r: r.arrival_seq)
