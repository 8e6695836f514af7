"""``+adapters=lora``: SGLang's stock LoRA path (PEFT LoRA adapters only), the
baseline Scute is compared with; its slots evicted in ``eviction`` order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from policies.adapters import AdaptersNeeds
from policies.adapters.slot_order import SlotOrderPolicy


@dataclass(frozen=True)
class LoraPolicy(SlotOrderPolicy):
    """SGLang's stock LoRA path (PEFT LoRA adapters only); slots evicted in ``eviction`` order
    (``lru``, ``fifo``, ``lfu``)."""

    needs: ClassVar[AdaptersNeeds] = AdaptersNeeds(mixed_methods=False)
