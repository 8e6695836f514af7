"""Adapters: which resident adapter gives up its batch slot to a new one.

A server holding many adapters (LoRA, DoRA, VeRA, OFT, IA3; see
``kernels/scute``) keeps only ``max_per_batch`` of them in the slots a forward
pass reads (the base model takes one while base requests run). When a batch
needs an adapter that is not resident and every slot is taken, one resident
adapter the batch does not use is evicted. This kind decides which.

Contract (the host's side):
  * ``choose_victim`` is offered only when a slot must be freed, with every
    resident adapter that may go: not needed by the batch being formed, not
    pinned. The list is never empty (the host refuses to start a batch that
    needs more adapters than slots).
  * The host evicts exactly the candidate named and loads the new adapter
    into its slot; the next view shows the new adapter with ``loaded_at`` of
    that moment.
  * Times are the host's batch counter (one tick per forward batch that used
    adapters), never a clock.

Contract (the policy's side): ``choose_victim`` is deterministic given the
view and names one of its candidates. The option also states, in ``needs``,
which adapter methods the host must serve (``AdaptersNeeds``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class AdapterSlotView:
    """One resident adapter that may be evicted."""

    name: str | None
    """The adapter's name; ``None`` is the base model's slot."""
    loaded_at: int
    """Batch tick at which it was loaded into its slot."""
    last_used: int
    """Batch tick of the last batch that used it (``loaded_at`` if none since)."""
    uses: int
    """Batches that used it since it was loaded."""


@dataclass(frozen=True, slots=True)
class SlotPoolView:
    """The eviction candidates and the moment of the choice."""

    candidates: tuple[AdapterSlotView, ...]
    """Resident adapters that may go (never empty)."""
    now: int
    """The current batch tick."""


@dataclass(frozen=True, slots=True)
class SlotEvictionDecision:
    """Evict ``view.candidates[index]``."""

    index: int


@dataclass(frozen=True)
class AdaptersNeeds:
    """What an adapters option needs from its host.

    NOTE: the one place a host learns an option's needs (its ``needs``
    attribute)."""

    mixed_methods: bool = False
    """The host serves every method ``kernels.scute`` reads (LoRA, DoRA, VeRA,
    OFT, IA3), mixed in one batch through the generalized slots. ``False``:
    SGLang's stock LoRA path, which serves PEFT LoRA adapters only."""


@runtime_checkable
class AdaptersPolicy(Protocol):
    """Chooses the resident adapter that gives up its slot (see module docs)."""

    needs: AdaptersNeeds
    """What the option needs from its host (``AdaptersNeeds``)."""

    def choose_victim(self, view: SlotPoolView) -> SlotEvictionDecision:
        """The candidate to evict."""
        ...


def check_decision(view: SlotPoolView, decision: SlotEvictionDecision) -> SlotEvictionDecision:
    """Return ``decision``, or raise ``ValueError`` if it names no candidate.
    NOTE: hosts call this on every decision; an out-of-range index would evict
    an adapter the batch needs or crash the slot table."""
    if not 0 <= decision.index < len(view.candidates):
        raise ValueError(f"adapters policy chose candidate {decision.index} of {len(view.candidates)}")
    return decision
