"""What a host remembers of its adapter slots to build ``SlotPoolView``s.

Both hosts (SGLang's LoRA memory pool, the simulator's slot table) keep one
``SlotHistory`` so that a policy sees the same views in both. Pure
bookkeeping: ticks are the host's batch counter, never a clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from policies.adapters import AdapterSlotView, AdaptersPolicy, SlotPoolView, check_decision


@dataclass
class _Entry:
    loaded_at: int
    last_used: int
    uses: int


class SlotHistory:
    """Batch ticks and each adapter's load/use history since it was last removed."""

    def __init__(self) -> None:
        self.tick = 0
        self._seen: dict[str | None, _Entry] = {}

    def next_batch(self) -> None:
        """A batch is being formed."""
        self.tick += 1

    def mark_used(self, name: str | None) -> None:
        """``name`` is in the batch being formed. NOTE: SGLang marks every
        adapter of a batch before loading the missing ones; the first mark
        since the adapter was removed is its load."""
        entry = self._seen.get(name)
        if entry is None:
            self._seen[name] = _Entry(self.tick, self.tick, 1)
        else:
            entry.last_used, entry.uses = self.tick, entry.uses + 1

    def remove(self, name: str | None) -> None:
        """``name`` left its slot (evicted or unloaded)."""
        self._seen.pop(name, None)

    def view(self, candidates: Iterable[str | None]) -> SlotPoolView:
        """The candidates, sorted by name (base first), as the policy sees them."""
        rows = []
        for name in sorted(candidates, key=lambda u: (u is not None, u or "")):
            e = self._seen.get(name) or _Entry(self.tick, self.tick, 0)
            rows.append(AdapterSlotView(name, e.loaded_at, e.last_used, e.uses))
        return SlotPoolView(tuple(rows), self.tick)

    def choose(self, policy: AdaptersPolicy, candidates: Iterable[str | None]) -> str | None:
        """The candidate ``policy`` evicts (checked)."""
        view = self.view(candidates)
        return view.candidates[check_decision(view, policy.choose_victim(view)).index].name
