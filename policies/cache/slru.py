"""``+cache=slru``: segmented LRU (SGLang's ``SLRUStrategy``), as a pure policy
that runs through Switchboard's eviction seam."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from policies.cache import BlockView, EvictionNeeds, EvictionRank


@dataclass(frozen=True)
class SlruPolicy:
    """Two segments: blocks hit fewer than ``protected_threshold`` times
    (probationary) go before the others (protected); LRU within a segment.

    ``hit_count`` is counted as for ``lfu`` (SGLang's node ``hit_count``).
    """

    needs: ClassVar[EvictionNeeds] = EvictionNeeds(sglang_strategy="slru")
    protected_threshold: int = 2
    """Hits that move a block into the protected segment (SGLang's default 2)."""

    def __post_init__(self) -> None:
        if self.protected_threshold < 0:
            raise ValueError(f"protected_threshold must be >= 0, got {self.protected_threshold}")

    def rank(self, block: BlockView) -> EvictionRank:
        protected = 1.0 if block.hit_count >= self.protected_threshold else 0.0
        return (protected, block.last_access, block.created)
