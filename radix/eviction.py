"""Which node the tree frees next: a heap of evictable nodes ranked by the policy.

A node is *evictable* when it is attached, unlocked and owns KV, and, for a
tail-only policy, a leaf of KV: no children, or only hollow ones (a host tier
keeps freed leaves as hollow nodes). A policy whose ``needs.interior`` is set
is offered interior nodes too. Entries are ``(policy.rank(view), node id,
version, node)``: smallest rank first, ties by smaller node id. An
entry is live while its version is the node's; the tree re-offers a node (new
version) whenever its rank or evictability may have changed, and stale
entries are skipped when popped.

``NOTE`` (invariant ``GapTree.check`` asserts): every evictable node without
waiting requests has a live entry, ranked as the policy ranks it
now. A node waiting requests touch (``waiting_ref``) has a rank that moves
with every scheduling pass (``touch_time``): such nodes are kept in
``touched`` instead and re-ranked before each eviction.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any

from policies.cache import BlockView, EvictionPolicy, EvictionRank
from radix.node import Node

_Entry = tuple[EvictionRank, int, int, Node[Any, Any]]


class EvictionQueue:
    """Evictable nodes, smallest policy rank first (see module docs)."""

    def __init__(self, policy: EvictionPolicy, unit_tokens: int, interior: bool) -> None:
        self.policy = policy
        self.unit_tokens = unit_tokens
        """Tokens per key unit (a node's ``prefix_len`` is ``start * unit_tokens``)."""
        self.interior = interior
        """Interior nodes are evictable too (``policy.needs.interior``)."""
        self.heap: list[_Entry] = []
        self.touched: set[Node[Any, Any]] = set()
        """Evictable nodes with waiting requests (re-ranked before each eviction)."""
        self.touch_time = 0.0
        """Time of the latest pass that touched waiting prefixes."""

    def evictable(self, n: Node[Any, Any]) -> bool:
        """Attached, unlocked, owns KV, and a leaf of KV (any node, if interior)."""
        if not n.attached or n.parent is None or n.lock_ref or n.hollow:
            return False
        if not n.children or self.interior:
            return True
        return all(c.hollow for c in n.children.values())

    def offer(self, n: Node[Any, Any]) -> None:
        """Queue ``n`` at its current rank if it is evictable (its older entries
        go stale). NOTE: one with waiting requests is remembered in ``touched``."""
        if not self.evictable(n):
            return
        n.version += 1
        self.push(n)
        if n.waiting_ref > 0:
            self.touched.add(n)

    def push(self, n: Node[Any, Any]) -> None:
        heapq.heappush(self.heap, (self.policy.rank(self.view(n)), n.id, n.version, n))

    def add_waiter(self, path: Iterable[Node[Any, Any]]) -> None:
        """A waiting request's match now runs through ``path``."""
        for n in path:
            n.waiting_ref += 1
            if n.waiting_ref == 1 and self.evictable(n):
                self.touched.add(n)

    def remove_waiter(self, path: Iterable[Node[Any, Any]]) -> None:
        """Undo ``add_waiter``: the nodes keep the recency ``touch_time`` gave them."""
        for n in path:
            n.waiting_ref -= 1
            if n.waiting_ref == 0:
                self.touched.discard(n)
                n.last_access = max(n.last_access, self.touch_time)
                self.offer(n)

    def rerank_touched(self) -> None:
        """Re-rank the touched nodes at the latest ``touch_time`` (before evicting)."""
        for n in list(self.touched):
            if self.evictable(n):
                n.version += 1
                self.push(n)
            else:
                self.touched.discard(n)

    def pop(self) -> Node[Any, Any] | None:
        """The evictable node of smallest rank, off the queue; ``None`` if none."""
        heap = self.heap
        while heap:
            _, _, version, node = heapq.heappop(heap)
            if version == node.version and self.evictable(node):
                return node
        return None

    def compact(self, num_nodes: int) -> None:
        """Rebuild the heap without stale entries once they dominate it."""
        if len(self.heap) <= 4 * num_nodes + 1024:
            return
        live = {n for *_, n in self.heap if self.evictable(n) and n.waiting_ref == 0}
        self.heap = []
        for n in live:
            n.version += 1
            self.heap.append((self.policy.rank(self.view(n)), n.id, n.version, n))
        heapq.heapify(self.heap)

    def live_ranks(self) -> dict[Node[Any, Any], EvictionRank]:
        """Each node's live entry's rank (for ``check``)."""
        return {n: rank for rank, _, version, n in self.heap if version == n.version}

    def view(self, n: Node[Any, Any]) -> BlockView:
        """The ``BlockView`` the policy ranks ``n`` by."""
        last = n.last_access
        if n.waiting_ref > 0:
            last = max(last, self.touch_time)
        return BlockView(block_id=n.id, num_tokens=n.num_tokens, prefix_len=n.start * self.unit_tokens,
                         last_access=last, created=n.created, hit_count=n.hit_count,
                         priority=n.priority, num_children=len(n.children),
                         num_sessions=1 if n.others is None else 1 + len(n.others))
