"""``+policy=shortest_prefill``: least uncached prompt tokens first, FCFS tie-break.

Switchboard's own baseline, run through the scheduling seam (not SGLang's
``shortest-prefill-first`` flag, which also defers in-batch prefix duplicates
and caps chunked prefills).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from policies.scheduling import OrderDecision, QueueView, SchedulingNeeds, ordered_by


@dataclass(frozen=True)
class ShortestPrefillPolicy:
    """Order by remaining prefill work: ``num_uncached_tokens``, then arrival."""

    needs: ClassVar[SchedulingNeeds] = SchedulingNeeds()

    def order(self, queue: QueueView) -> OrderDecision:
        return ordered_by(queue, lambda r: (r.num_uncached_tokens, r.arrival_seq))
