"""``+cache=priority``: lowest request priority first, then least recently used
(SGLang's ``PriorityStrategy``), as a pure policy that runs through
Switchboard's eviction seam."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from policies.cache import BlockView, EvictionNeeds, EvictionRank


@dataclass(frozen=True)
class PriorityPolicy:
    """Blocks inserted by lower-priority requests first; LRU among equals.

    Without request priorities (every block 0) this is ``lru``.
    """

    needs: ClassVar[EvictionNeeds] = EvictionNeeds(sglang_strategy="priority")

    def rank(self, block: BlockView) -> EvictionRank:
        return (float(block.priority), block.last_access, block.created)
