"""What the tree's helpers (``radix.kv``, ``radix.check``) read and move of a tree.

``GapTree`` is the one implementation; the helpers take this Protocol instead
of the class, so that ``radix.tree`` imports them and nothing imports it back.

NOTE: invariant: no module of ``radix/`` reaches itself through its imports
(``tests/config/test_boundaries.py``); a helper needing more of the tree adds
it here, never an import of ``radix.tree``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from policies.cache import EvictionPolicy
from radix.bindings import KeyIndex, Slots
from radix.eviction import EvictionQueue
from radix.host import HostTier
from radix.node import K, Node, V


class TreeCore(Protocol[K, V]):
    """A gap tree's parts and counters (``GapTree``'s attributes of the same names)."""

    policy: EvictionPolicy
    """Ranks evictable nodes."""
    keys: KeyIndex[K]
    """The host's key index (structural hooks)."""
    unit_tokens: int
    """Tokens per key unit."""
    slots: Slots[V] | None
    """The host's KV slots (``None``: token counts only)."""
    host: HostTier | None
    """The host tier (``None``: none)."""
    interior: bool
    """Interior nodes may be freed (made hollow), not only leaves."""
    queue: EvictionQueue
    """Evictable nodes by rank."""
    root: Node[K, V]
    """The root (never evicted, never counted)."""
    tree_tokens: int
    """Tokens of KV the tree holds."""
    evictable_tokens: int
    """Tokens of KV in unlocked nodes."""
    num_nodes: int
    """Nodes but the root."""
    num_evicted_tokens: int
    """Tokens evicted so far."""

    def nodes(self) -> Iterator[Node[K, V]]:
        """Every node but the root."""
        ...

    def path_to(self, node: Node[K, V]) -> list[Node[K, V]]:
        """Nodes from the root (excluded) down to ``node``."""
        ...
