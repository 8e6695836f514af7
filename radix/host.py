"""The host tier's accounting: which hollow nodes have their KV in host memory.

When the tree frees a node's KV and the tier can hold it (``fits``), the host
copies the KV out first (``HostCopies.offload``, optional: a host that only
counts tokens keeps no payload), the node stays hollow with its keys and is
*held* here (``on_host``). A request through it restores the copy instead of
recomputing it; filling the node (restored, recomputed or inserted) drops
the copy. The tier holds at most ``capacity`` tokens: adding a copy drops
the oldest ones first (ties: smaller node id first); the tree prunes a node
a dropped copy leaves useless. A split of a held node splits its copy; both
parts keep its age.

NOTE: a lock keeps a node's place, not its copy: making room for a restore
or refill may drop copies on the locked path itself (oldest first, locked or
not), so a restorer reads what is held after making room (the server's
``restore_host_run``, the simulator's ``fill_path``) and recomputes the rest;
``GapTree.unlock`` prunes a node such a drop left useless.

``NOTE`` (invariants ``GapTree.check`` asserts)::

    used = sum(n.num_tokens for held n) <= capacity    held n  =>  n.hollow
    num_copies = number of held nodes                  (the heap's live entries)
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable
from typing import Any

from radix.bindings import HostCopies
from radix.node import Node

_Entry = tuple[int, int, Node[Any, Any]]


class HostTier:
    """Host copies of hollow nodes, oldest dropped first (see module docs)."""

    def __init__(self, capacity: int, copies: HostCopies | None = None) -> None:
        self.capacity = capacity
        """Tokens the tier holds at most."""
        self.copies = copies
        """The host's payload store, if it keeps the KV itself."""
        self.used = 0
        self.num_copies = 0
        self.num_stored_tokens = 0
        """Tokens ever copied in."""
        self.num_restored_tokens = 0
        """Tokens ever restored from a copy (``GapTree.fill(restore=True)``)."""
        self._stamps = itertools.count()
        self._heap: list[_Entry] = []
        """``(stamp, node id, node)``; entries of nodes no longer held are dead."""

    def fits(self, tokens: int) -> bool:
        """Whether a node of ``tokens`` can be held at all."""
        return 0 < tokens <= self.capacity

    def offload(self, node: Node[Any, Any]) -> object:
        """The host's copy of ``node``'s KV (before the tree frees it), if it keeps one."""
        return None if self.copies is None else self.copies.offload(node)

    def add(self, node: Node[Any, Any], copy: object) -> list[Node[Any, Any]]:
        """Hold hollow ``node`` (its copy ``copy``); return the nodes dropped for room."""
        assert not node.on_host and self.fits(node.num_tokens)
        node.on_host = True
        node.host_stamp = next(self._stamps)
        node.host_copy = copy
        self._push(node)
        self.used += node.num_tokens
        self.num_stored_tokens += node.num_tokens
        dropped = []
        while self.used > self.capacity:
            stamp, _, old = heapq.heappop(self._heap)
            if old.on_host and old.host_stamp == stamp:
                self.discard(old)
                dropped.append(old)
        return dropped

    def discard(self, node: Node[Any, Any]) -> None:
        """Forget ``node``'s copy, if held (filled, or dropped for room)."""
        if not node.on_host:
            return
        node.on_host = False
        self.used -= node.num_tokens
        self.num_copies -= 1
        if self.copies is not None and node.host_copy is not None:
            self.copies.drop(node.host_copy)
        node.host_copy = None

    def split(self, head: Node[Any, Any], tail: Node[Any, Any], k: int) -> None:
        """``head`` (first ``k`` units) was split off held ``tail``: held too, same age."""
        self._push(head)
        if self.copies is not None:
            head.host_copy, tail.host_copy = self.copies.split(tail.host_copy, k, head, tail)

    def held(self, nodes: Iterable[Node[Any, Any]]) -> int:
        """Tokens of ``nodes`` held here (for ``check``)."""
        return sum(n.num_tokens for n in nodes if n.on_host)

    def _push(self, node: Node[Any, Any]) -> None:
        heapq.heappush(self._heap, (node.host_stamp, node.id, node))
        self.num_copies += 1
        if len(self._heap) > 4 * self.num_copies + 64:  # NOTE: dead entries stay dead: drop them
            self._heap = [e for e in self._heap if e[2].on_host and e[2].host_stamp == e[0]]
            heapq.heapify(self._heap)
