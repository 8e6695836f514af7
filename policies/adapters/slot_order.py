"""Slot eviction orders shared by the adapters options (not an option itself)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from policies.adapters import AdapterSlotView, SlotEvictionDecision, SlotPoolView

#: ``lru``: least recently used first (SGLang's default); ``fifo``: first
#: loaded first (SGLang's other); ``lfu``: fewest uses since loading first.
SlotOrder = Literal["lru", "fifo", "lfu"]
ORDERS: tuple[str, ...] = ("lru", "fifo", "lfu")


def victim(view: SlotPoolView, order: str) -> SlotEvictionDecision:
    """The candidate ``order`` evicts first.

    NOTE: the base model's slot goes last (evicting it stalls base requests;
    SGLang's orders avoid it too), and ties within one batch tick go by name,
    the order in which SGLang marks a batch's adapters: with these, ``lru``
    and ``fifo`` choose exactly as SGLang's own ``lru`` and ``fifo``."""
    def key(c: AdapterSlotView) -> tuple[bool | int | str, ...]:
        base_last, name = c.name is None, c.name or ""
        if order == "lru":
            return (base_last, c.last_used, name)
        if order == "fifo":
            return (base_last, c.loaded_at, name)
        return (base_last, c.uses, c.last_used, name)

    if order not in ORDERS:
        raise ValueError(f"unknown slot order {order!r}; choose one of {', '.join(ORDERS)}")
    best = min(range(len(view.candidates)), key=lambda i: key(view.candidates[i]))
    return SlotEvictionDecision(best)


@dataclass(frozen=True)
class SlotOrderPolicy:
    """Evicts by one of ``ORDERS``; the options subclass it with their ``needs``."""

    eviction: SlotOrder = "lru"
    """Slot eviction order: ``lru`` (least recently used; SGLang's default),
    ``fifo`` (first loaded), ``lfu`` (fewest uses since loaded)."""

    def __post_init__(self) -> None:
        if self.eviction not in ORDERS:
            raise ValueError(f"eviction: unknown order {self.eviction!r}; choose one of {', '.join(ORDERS)}")

    def choose_victim(self, view: SlotPoolView) -> SlotEvictionDecision:
        return victim(view, self.eviction)
