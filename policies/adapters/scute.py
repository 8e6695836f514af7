"""``+adapters=scute``: every PEFT method Scute reads (LoRA, DoRA, VeRA, OFT,
IA3), mixed exactly in one batch through the generalized slots
(``kernels/scute``), with a configurable slot eviction order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from policies.adapters import AdaptersNeeds
from policies.adapters.slot_order import SlotOrderPolicy


@dataclass(frozen=True)
class ScutePolicy(SlotOrderPolicy):
    """Every PEFT method Scute reads (LoRA, DoRA, VeRA, OFT, IA3) mixed exactly in one batch;
    slots evicted in ``eviction`` order (``lru``, ``fifo``, ``lfu``)."""

    needs: ClassVar[AdaptersNeeds] = AdaptersNeeds(mixed_methods=True)
