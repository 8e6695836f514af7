"""``+cache=mru``: most recently used first (SGLang's ``MRUStrategy``), as a pure
policy that runs through Switchboard's eviction seam."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from policies.cache import BlockView, EvictionNeeds, EvictionRank


@dataclass(frozen=True)
class MruPolicy:
    """Newest ``last_access`` first; ties by creation order, newest first."""

    needs: ClassVar[EvictionNeeds] = EvictionNeeds(sglang_strategy="mru")

    def rank(self, block: BlockView) -> EvictionRank:
        return (-block.last_access, -block.created)
