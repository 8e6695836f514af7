"""Test policies shared by the tiers (pure: importable by any test)."""

from __future__ import annotations

from typing import ClassVar

from policies.cache import BlockView, EvictionNeeds, EvictionRank


class EvictBlocksAt:
    """Frees the blocks starting at the given token positions first, interior ones too."""

    needs: ClassVar[EvictionNeeds] = EvictionNeeds(interior=True)

    def __init__(self, *starts: int) -> None:
        self.starts = starts

    def rank(self, block: BlockView) -> EvictionRank:
        return (0.0 if block.prefix_len in self.starts else 1.0, float(block.prefix_len))
