"""``+policy=shortest-prefill-first``: SGLang's experimental SPF order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from policies.scheduling import OrderDecision, QueueView, SchedulingNeeds, ordered_by


@dataclass(frozen=True)
class ShortestPrefillFirstPolicy:
    """In-batch duplicates last, then least uncached work (at least 1 token),
    then arrival time. Inside SGLang: ``--schedule-policy shortest-prefill-first``
    (which also caps a running chunked prefill; the simulator does not)."""

    needs: ClassVar[SchedulingNeeds] = SchedulingNeeds(sglang_native="shortest-prefill-first")

    def order(self, queue: QueueView) -> OrderDecision:
        return ordered_by(
            queue,
            lambda r: (
                r.in_batch_duplicate,
                max(1, r.num_input_tokens - r.num_cached_tokens),
                r.arrival_time,
            ),
        )
