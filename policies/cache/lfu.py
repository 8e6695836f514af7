"""``+cache=lfu``: least frequently used first, as SGLang's ``LFUStrategy``, run
as a pure policy through Switchboard's eviction seam."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from policies.cache import BlockView, EvictionNeeds, EvictionRank


@dataclass(frozen=True)
class LfuPolicy:
    """Fewest hits first; among equal hit counts the least recently used.

    ``hit_count`` counts the requests that inserted through the block (its
    creator included), as SGLang's radix tree counts them; the rank is
    SGLang's ``(hit_count, last_access_time)``.
    """

    needs: ClassVar[EvictionNeeds] = EvictionNeeds(sglang_strategy="lfu")

    def rank(self, block: BlockView) -> EvictionRank:
        return (float(block.hit_count), block.last_access)
