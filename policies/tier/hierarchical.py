"""``+tier=hierarchical``: SGLang's own inclusive hierarchy (HiCache cache mode with file storage).

Every block backed up below the device goes to host memory and is written
through to SSD: storage holds a superset of memory, so memory adds speed, not
capacity. Without an SSD level it is host memory alone.
"""

from __future__ import annotations

from typing import ClassVar

from policies.tier import Home, PlacementView, TierNeeds


class HierarchicalPolicy:
    """Memory and SSD both, for every block (SGLang's ``--hicache-host-memory-mode cache``)."""

    needs: ClassVar[TierNeeds] = TierNeeds(ssd=False)

    def place(self, view: PlacementView) -> Home:
        return Home.BOTH if view.ssd_capacity_tokens else Home.MEMORY
