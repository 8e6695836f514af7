"""``+policy=shortest_output``: fewest remaining declared output tokens first.

Ranks by ``max_new_tokens - num_output_tokens``: inside SGLang that is the
client's ``max_tokens`` cap (SJF on declared lengths); in the simulator, where
a request's ``max_new_tokens`` is its true output length, it is the *oracle*
SJF that LEAP's sweeps compare against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from policies.scheduling import OrderDecision, QueueView, SchedulingNeeds, ordered_by


@dataclass(frozen=True)
class ShortestOutputPolicy:
    """Order by remaining ``max_new_tokens``, then arrival (no aging: an oracle bound)."""

    needs: ClassVar[SchedulingNeeds] = SchedulingNeeds()

    def order(self, queue: QueueView) -> OrderDecision:
        return ordered_by(queue, lambda r: (r.max_new_tokens - r.num_output_tokens, r.arrival_seq))
