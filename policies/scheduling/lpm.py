"""``+policy=lpm``: SGLang's longest-prefix-match order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from policies.scheduling import OrderDecision, QueueView, SchedulingNeeds, ordered_by


@dataclass(frozen=True)
class LpmPolicy:
    """Most cached tokens first; in-batch duplicates last; ties keep queue
    order. Inside SGLang: ``--schedule-policy lpm``."""

    needs: ClassVar[SchedulingNeeds] = SchedulingNeeds(sglang_native="lpm")

    def order(self, queue: QueueView) -> OrderDecision:
        return ordered_by(
            queue,
            lambda r: float("inf") if r.in_batch_duplicate else -r.num_cached_tokens,
        )
