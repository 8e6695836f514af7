"""Slot-eviction seam: a pure ``AdaptersPolicy`` as SGLang's LoRA ``EvictionPolicy``.

SGLang's ``LoRAMemoryPool`` calls ``mark_used`` for every adapter of a batch
being formed, ``select_victim`` when a slot must be freed (with the adapters
the batch does not need and that are not pinned; the base model's slot only if
nothing else may go) and ``remove`` when an adapter leaves its slot. The batch
tick advances in ``prepare_lora_batch`` (``hooks.install``).
"""

from __future__ import annotations

from sglang.srt.lora.eviction_policy import EvictionPolicy

from policies.adapters import AdaptersPolicy
from policies.adapters.history import SlotHistory


class PolicySlotEviction(EvictionPolicy):
    """SGLang's eviction interface over ``SlotHistory`` and a policy."""

    def __init__(self, policy: AdaptersPolicy) -> None:
        self.policy = policy
        self.history = SlotHistory()
        self.eviction_count = 0

    def next_batch(self) -> None:
        self.history.next_batch()

    def mark_used(self, uid: str | None) -> None:
        self.history.mark_used(uid)

    def select_victim(self, candidates: set[str | None]) -> str | None:
        self.eviction_count += 1
        return self.history.choose(self.policy, candidates)

    def remove(self, uid: str | None) -> None:
        self.history.remove(uid)
