"""``+cache=fifo``: first inserted first (SGLang's ``FIFOStrategy``), as a pure
policy that runs through Switchboard's eviction seam."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from policies.cache import BlockView, EvictionNeeds, EvictionRank


@dataclass(frozen=True)
class FifoPolicy:
    """Oldest ``created`` first; ties by last access."""

    needs: ClassVar[EvictionNeeds] = EvictionNeeds(sglang_strategy="fifo")

    def rank(self, block: BlockView) -> EvictionRank:
        return (block.created, block.last_access)
