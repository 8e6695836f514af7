"""``+cache=histate``: one eviction order over KV blocks and recurrent-state
snapshots of a hybrid model (HiState), as a pure eviction policy.

A hybrid model (attention layers beside recurrent ones: Mamba, gated delta
nets, short convolutions) resumes a cached prefix only from a recurrent-state
snapshot taken at its end; a snapshot cannot be cut back, so without one the
whole stretch back to the previous snapshot is recomputed. The asymmetry HiState
rests on: a hit reads every matching KV entry but only one snapshot, and a
snapshot's size does not depend on the context length. So snapshots and KV go
through one queue, each item valued by what its loss costs per byte it frees:
a snapshot that spares thousands of tokens of recompute is worth keeping over
the same bytes of KV, and a snapshot moved to SSD keeps almost all of its value.

The published score is *(last access time + extra tokens to recompute if it
goes) / space freed*, lowest first. Taken literally it depends on the clock's
origin (the access time is divided by the bytes). Here it is read as an
expected benefit per byte that decays with age, ``exp(-(now - last_access) / τ)
· recompute_tokens / nbytes``, whose order at any moment is the order of

    last_access + τ · ln(recompute_tokens / nbytes)

``NOTE``: this rank needs no ``now`` and no unit of cost: the units of tokens
and bytes only shift every rank by the same constant. So a host may rank an
item once, when it is offered (a heap), and the order stays right as time
passes. Between KV blocks (``recompute_tokens / nbytes`` is one over the KV
bytes per token) it is least recently used first; a snapshot worth ``k`` times
more per byte than KV stays ``τ · ln k`` seconds longer.

What going means is the host's (``policies.cache`` NOTE on snapshots): a device
snapshot is demoted to the SSD store, and its view's ``recompute_tokens`` is the
read time in prefill tokens; an SSD snapshot is deleted, and its
``recompute_tokens`` is the distance back to the previous snapshot kept on its
path. An item whose loss costs nothing (``recompute_tokens`` 0) goes first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from policies.cache import BlockView, EvictionNeeds, EvictionRank


@dataclass(frozen=True)
class HistatePolicy:
    """Least expected recompute per byte first, decaying with age (see module docs)."""

    tau_s: float = 60.0
    """Decay time of an item's value, in the host's time unit (seconds): a
    snapshot worth ``k`` times more recompute per byte than KV outlives KV of
    the same last access by ``tau_s · ln k``. 0 = least recently used across
    kinds, value only breaking ties."""

    needs: ClassVar[EvictionNeeds] = EvictionNeeds(snapshots=True, refresh_waiting=True)
    """Snapshots are ranked with KV (``policies.cache`` NOTE on snapshots); the
    waiting queue's prefixes are refreshed as for LRU (its rank decays with age)."""

    def __post_init__(self) -> None:
        if not self.tau_s >= 0.0 or math.isinf(self.tau_s):
            raise ValueError(f"cache.tau_s must be a finite number >= 0, got {self.tau_s}")

    def value_per_byte(self, block: BlockView) -> float:
        """``ln(recompute_tokens / nbytes)``: what the item's loss costs per byte it
        frees (``-inf`` when it costs nothing; ``nbytes`` 0 counts as one byte)."""
        if block.recompute_tokens <= 0:
            return -math.inf
        return math.log(block.recompute_tokens / max(block.nbytes, 1))

    def rank(self, block: BlockView) -> EvictionRank:
        value = self.value_per_byte(block)
        if value == -math.inf:
            return (-math.inf, block.last_access, block.created)
        return (block.last_access + self.tau_s * value, value, block.created)
