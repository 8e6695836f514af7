"""``+cache=lru``: least recently used first (SGLang's default order), as a pure
policy that runs through Switchboard's eviction seam."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from policies.cache import BlockView, EvictionNeeds, EvictionRank


@dataclass(frozen=True)
class LruPolicy:
    """Oldest ``last_access`` first; ties by creation order. As in stock SGLang,
    the waiting queue's prefixes are refreshed (``EvictionNeeds.refresh_waiting``)."""

    needs: ClassVar[EvictionNeeds] = EvictionNeeds(sglang_strategy="lru", refresh_waiting=True)

    def rank(self, block: BlockView) -> EvictionRank:
        return (block.last_access, block.created)
