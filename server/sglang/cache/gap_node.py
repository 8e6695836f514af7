"""Nodes of the gap tree (``gap_tree.py``), and the host tier's interface to it.

A ``GapNode`` carries SGLang's radix-node attribute names (``key``, ``value``,
``lock_ref``, ``last_access_time`` ...) plus what gaps need: ``start`` (the
position of its first token), the sessions that went through it, and
``host`` (the host tier's copy of a hollow node's KV). Torch-free, like the tree.
"""

from __future__ import annotations

import itertools
from typing import Any, Optional, Protocol

_ids = itertools.count(1)


class HostCopies(Protocol):
    """A host-memory tier the tree hands freed KV to (``host_kv.HostKVTier``)."""

    def offload(self, node: GapNode) -> Any:
        """Copy ``node``'s KV (its ``value`` slots) to host memory before the
        tree frees them; return the copy's handle, or ``None`` if not kept."""
        ...

    def split(self, handle: Any, k: int, head: GapNode, tail: GapNode) -> tuple[Any, Any]:
        """Split a copy after ``k`` tokens, as the tree split its node."""
        ...

    def drop(self, handle: Any) -> None:
        """Forget a copy (its node got device KV again)."""
        ...


class GapNode:
    """One tree node; SGLang's node attribute names, plus ``start`` and sessions."""

    __slots__ = ("id", "parent", "children", "key", "value", "start", "lock_ref",
                 "last_access_time", "creation_time", "hit_count", "priority",
                 "session", "others", "host")

    def __init__(self, parent: Optional[GapNode], key: Any, value: Any, start: int,
                 now: float, priority: int = 0) -> None:
        self.id = next(_ids)
        self.parent = parent
        self.children: dict[Any, GapNode] = {}
        self.key = key
        self.value = value
        """KV slot indices of the key's tokens; ``None`` when hollow."""
        self.start = start
        """Position of the node's first token in every sequence through it."""
        self.lock_ref = 0
        self.last_access_time = now
        self.creation_time = now
        self.hit_count = 0
        self.priority = priority
        self.session: Optional[str] = None
        """First session that inserted through the node."""
        self.others: Optional[set[str]] = None
        """Other sessions that did."""
        self.host: Any = None
        """Handle of the host tier's copy of a hollow node's KV, if any."""

    @property
    def hollow(self) -> bool:
        return self.value is None

    @property
    def end(self) -> int:
        return self.start + len(self.key)

    @property
    def kv_tokens(self) -> int:
        return 0 if self.value is None else len(self.key)


def first_gap(path: list[GapNode]) -> int:
    """Index of the first hollow node on ``path`` (``len(path)`` if none): the
    nodes before it are the contiguous cached prefix."""
    return next((i for i, n in enumerate(path) if n.hollow), len(path))


def merge_ranges(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Adjacent half-open ranges merged (input in ascending order)."""
    merged: list[tuple[int, int]] = []
    for start, end in ranges:
        if merged and merged[-1][1] == start:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged
