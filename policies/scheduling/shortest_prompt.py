"""``+policy=shortest_prompt``: shortest prompt first (prompt-length SJF).

The classic length-unaware SJF proxy: a request's whole prompt length (cached
or not) stands in for its job size. LEAP's baseline of "existing predictors"
at its cheapest; see ``shortest_prefill`` for the cache-aware variant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from policies.scheduling import OrderDecision, QueueView, SchedulingNeeds, ordered_by


@dataclass(frozen=True)
class ShortestPromptPolicy:
    """Order by ``num_input_tokens`` (prompt plus output so far), then arrival."""

    needs: ClassVar[SchedulingNeeds] = SchedulingNeeds()

    def order(self, queue: QueueView) -> OrderDecision:
        return ordered_by(queue, lambda r: (r.num_input_tokens, r.arrival_seq))
