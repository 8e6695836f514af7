"""``+adapters=lora``: SGLang's stock LoRA path (PEFT LoRA adapters only), the
baseline Scute is compared with; its slots evicted in ``eviction`` order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from policies.adapters import AdaptersNeeds, SlotEvictionDecision, SlotPoolView
from policies.adapters.slot_order import ORDERS, SlotOrder, victim


@dataclass(frozen=True)
class LoraPolicy:
    """SGLang's LoRA adapters; slots evicted in ``eviction`` order."""

    eviction: SlotOrder = "lru"
    """Slot eviction order: ``lru`` (SGLang's default), ``fifo``, ``lfu``."""

    needs: ClassVar[AdaptersNeeds] = AdaptersNeeds(mixed_methods=False)

    def __post_init__(self) -> None:
        if self.eviction not in ORDERS:
            raise ValueError(f"eviction: unknown order {self.eviction!r}; choose one of {', '.join(ORDERS)}")

    def choose_victim(self, view: SlotPoolView) -> SlotEvictionDecision:
        return victim(view, self.eviction)
