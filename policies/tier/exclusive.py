"""``+tier=exclusive``: host memory and SSD disjoint, cold memory pages demoted to SSD.

Every block starts in host memory; evicted from there it moves to SSD
(``TierNeeds.demote``) instead of being dropped, so no block is held twice and
the two levels' capacities add up (the exclusive tiering proposed for SGLang in
sgl-project/sglang#39845).
"""

from __future__ import annotations

from typing import ClassVar

from policies.tier import Home, PlacementView, TierNeeds


class ExclusivePolicy:
    """Memory first, demoted to SSD on eviction."""

    needs: ClassVar[TierNeeds] = TierNeeds(ssd=True, demote=True)

    def place(self, view: PlacementView) -> Home:
        return Home.MEMORY
