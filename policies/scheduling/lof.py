"""``+policy=lof``: SGLang's longest-output-first (by ``max_new_tokens``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from policies.scheduling import OrderDecision, QueueView, SchedulingNeeds, ordered_by


@dataclass(frozen=True)
class LofPolicy:
    """Largest ``max_new_tokens`` first; ties keep queue order (a stable sort,
    as SGLang's in-place ``list.sort``). Inside SGLang: ``--schedule-policy lof``."""

    needs: ClassVar[SchedulingNeeds] = SchedulingNeeds(sglang_native="lof")

    def order(self, queue: QueueView) -> OrderDecision:
        return ordered_by(queue, lambda r: -r.max_new_tokens)
