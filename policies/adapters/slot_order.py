"""Slot eviction orders shared by the adapters options (not an option itself)."""

from __future__ import annotations

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
