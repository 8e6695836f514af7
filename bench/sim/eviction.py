"""Eviction in the simulated prefix cache (``PrefixCache`` inherits it; see
``bench/sim/cache.py``'s docs): a heap of evictable nodes ranked by the
policy's ``rank(BlockView)``, smallest first, with lazy invalidation (a node's
``version`` moves whenever its rank may have), and the recency updates that
re-rank nodes.

``NOTE``: a leaf that waiting requests touch (``touch_waiting``) has a rank
that moves with every scheduling pass; such leaves are kept in
``_touched_leaves`` and re-ranked before each eviction instead of on every pass.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Callable, Optional

from policies.cache import BlockView, EvictionPolicy

if TYPE_CHECKING:
    from bench.sim.cache import Node


class EvictionMixin:
    """Policy-ranked eviction of ``PrefixCache`` nodes (see module docs)."""

    block_size: int
    policy: EvictionPolicy
    hollows: bool
    tree_tokens: int
    evictable_tokens: int
    num_nodes: int
    num_evicted_tokens: int
    touch_time: float
    _heap: list
    _touched_leaves: set["Node"]
    _node_of: dict[int, "Node"]
    on_evict: Optional[Callable[["Node"], None]]
    _free: Callable[["Node"], int]

    def evict(self, num_tokens: int) -> int:
        """Free at least ``num_tokens`` cached tokens if that many are
        evictable (whole nodes, smallest rank first); return the tokens freed."""
        for n in list(self._touched_leaves):
            if self._is_evictable(n):
                n.version += 1
                self._push(n)
            else:
                self._touched_leaves.discard(n)
        freed = 0
        heap = self._heap
        while freed < num_tokens and heap:
            _, _, version, node = heapq.heappop(heap)
            if version != node.version or not self._is_evictable(node):
                continue
            freed += self._free(node)
        self.num_evicted_tokens += freed
        if len(heap) > 4 * self.num_nodes + 1024:
            self._rebuild_heap()
        return freed

    def _remove_leaf(self, node: Node) -> int:
        parent = node.parent
        assert parent is not None
        del parent.children[node.blocks[0]]
        for b in node.blocks:
            del self._node_of[b]
        node.attached = False
        self.num_nodes -= 1
        self._touched_leaves.discard(node)
        kv = node.kv_tokens
        self.tree_tokens -= kv
        self.evictable_tokens -= kv
        if self.on_evict is not None:
            self.on_evict(node)
        if not parent.children or self.hollows or self.host is not None:
            self._offer(parent)
        return kv

    def _is_evictable(self, n: Node) -> bool:
        """Unlocked, owns KV, and a leaf of KV (or any node, when hollowing)."""
        if not n.attached or n.parent is None or n.lock_ref or n.hollow:
            return False
        if not n.children or self.hollows:
            return True
        return all(c.hollow for c in n.children.values())

    def _offer(self, n: Node) -> None:
        """Queue ``n`` for eviction if it is an unlocked leaf now.

        NOTE: a leaf waiting requests touch is also remembered: its rank moves
        with every pass, so ``evict`` re-ranks it before each eviction."""
        if not self._is_evictable(n):
            return
        n.version += 1
        self._push(n)
        if n.waiting_ref > 0:
            self._touched_leaves.add(n)

    def _push(self, n: Node) -> None:
        heapq.heappush(self._heap, (self.policy.rank(self.view(n)), n.id, n.version, n))

    def _rebuild_heap(self) -> None:
        live = {n for *_, n in self._heap if self._is_evictable(n) and n.waiting_ref == 0}
        self._heap = []
        for n in live:
            n.version += 1
            self._heap.append((self.policy.rank(self.view(n)), n.id, n.version, n))
        heapq.heapify(self._heap)

    def _set_access(self, n: Node, now: float) -> None:
        if n.last_access != now:
            n.last_access = now
            self._offer(n)

    def _touch_path(self, node: Node, now: float) -> None:
        for n in self.path(node):
            self._set_access(n, now)

    def view(self, n: Node) -> BlockView:
        """The ``BlockView`` the eviction policy ranks ``n`` by."""
        last = n.last_access
        if n.waiting_ref > 0:
            last = max(last, self.touch_time)
        return BlockView(block_id=n.id, num_tokens=n.num_tokens, prefix_len=n.start * self.block_size,
                         last_access=last, created=n.created, hit_count=n.hit_count,
                         priority=n.priority, num_children=len(n.children),
                         num_sessions=1 if n.others is None else 1 + len(n.others))
