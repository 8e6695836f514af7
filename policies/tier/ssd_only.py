"""``+tier=ssd_only``: SSD is the only level below the device (SGLang's ``buffer_only`` host mode).

Host memory only stages writes and reads; every block's home is storage.
"""

from __future__ import annotations

from typing import ClassVar

from policies.tier import Home, PlacementView, TierNeeds


class SsdOnlyPolicy:
    """Every block on SSD (SGLang's ``--hicache-host-memory-mode buffer_only``)."""

    needs: ClassVar[TierNeeds] = TierNeeds(ssd=True, memory=False)

    def place(self, view: PlacementView) -> Home:
        return Home.SSD
