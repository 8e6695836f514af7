"""``+cache=filo``: last inserted first (SGLang's ``FILOStrategy``), as a pure
policy that runs through Switchboard's eviction seam."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from policies.cache import BlockView, EvictionNeeds, EvictionRank


@dataclass(frozen=True)
class FiloPolicy:
    """Newest ``created`` first; ties by last access, newest first."""

    needs: ClassVar[EvictionNeeds] = EvictionNeeds(sglang_strategy="filo")

    def rank(self, block: BlockView) -> EvictionRank:
        return (-block.created, -block.last_access)
