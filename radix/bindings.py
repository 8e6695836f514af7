"""What a host binds the gap tree to: its keys, its KV slots, its host memory.

Each is a small Protocol the host implements (``server/sglang/cache/`` binds
SGLang's keys, slot tensors and KV pool; ``bench/sim/cache.py`` binds block
ids and token counts). Only ``KeyIndex`` is required: a host that tracks token
counts only binds no ``Slots``, and one without a host tier no ``HostCopies``.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Protocol, TypeVar

from radix.node import Key, Node

K = TypeVar("K", bound=Key)
V = TypeVar("V")


class KeyIndex(Protocol[K]):
    """How the host's keys are matched, and the tree's structural hooks (a host
    index, e.g. block id -> node, is kept current through them)."""

    def edge(self, key: K) -> Hashable:
        """The key of a node whose key is ``key`` in its parent's ``children``
        (its first unit, or first page)."""
        ...

    def locate(self, root: Node[K, Any], key: K) -> tuple[int, Node[K, Any]]:
        """Leading units of ``key`` the tree holds, and the node the match ends
        in (it may extend past the match: the tree splits it); ``(0, root)``
        if none. NOTE: hollow nodes count: their keys stay in the tree."""
        ...

    def attached(self, node: Node[K, Any]) -> None:
        """``node`` was added as a new leaf."""
        ...

    def split(self, head: Node[K, Any], tail: Node[K, Any]) -> None:
        """``head`` was split off the front of ``tail`` (now its only child)."""
        ...

    def detached(self, node: Node[K, Any]) -> None:
        """``node`` left the tree (evicted or pruned; its parent link stays)."""
        ...


class Slots(Protocol[V]):
    """The host's KV slots: what a node's ``value`` is."""

    def take(self, value: V, start: int, end: int) -> V:
        """The node's own copy of units ``[start, end)`` of ``value``."""
        ...

    def free(self, value: V) -> None:
        """Give a node's slots back to the host's pool."""
        ...

    def size(self, value: V) -> int:
        """Tokens ``value`` holds (``GapTree.check`` compares it to the node's)."""
        ...


class HostCopies(Protocol):
    """The payload side of a host tier (``radix.host.HostTier`` keeps the
    accounting): copies of freed KV in host memory."""

    def offload(self, node: Node[Any, Any]) -> object:
        """Copy ``node``'s KV (its ``value``) out before the tree frees it;
        return the copy's handle (kept in ``node.host_copy``)."""
        ...

    def split(self, copy: object, k: int, head: Node[Any, Any],
              tail: Node[Any, Any]) -> tuple[object, object]:
        """Split a copy after ``k`` units, as the tree split its node."""
        ...

    def drop(self, copy: object) -> None:
        """Forget a copy (its node got device KV again, or the tier dropped it)."""
        ...
