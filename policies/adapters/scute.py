"""``+adapters=scute``: every PEFT method Scute reads (LoRA, DoRA, VeRA, OFT,
IA3), mixed exactly in one batch through the generalized slots
(``kernels/scute``), with a configurable slot eviction order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from policies.adapters import AdaptersNeeds, SlotEvictionDecision, SlotPoolView
from policies.adapters.slot_order import ORDERS, SlotOrder, victim


@dataclass(frozen=True)
class ScutePolicy:
    """Scute's adapters; slots evicted in ``eviction`` order."""

    eviction: SlotOrder = "lru"
    """Slot eviction order: ``lru`` (least recently used), ``fifo`` (first
    loaded), ``lfu`` (fewest uses since loaded)."""

    needs: ClassVar[AdaptersNeeds] = AdaptersNeeds(mixed_methods=True)

    def __post_init__(self) -> None:
        if self.eviction not in ORDERS:
            raise ValueError(f"eviction: unknown order {self.eviction!r}; choose one of {', '.join(ORDERS)}")

    def choose_victim(self, view: SlotPoolView) -> SlotEvictionDecision:
        return victim(view, self.eviction)
