"""The radix tree of the gap-capable prefix cache: nodes that can be *hollow*.

A node holds a run of token keys and, unless it is hollow, the KV slots of
those tokens (``value``). As in SGLang's radix tree, matching splits a node
where the match ends, a lock covers the whole path to a node, and eviction
frees whole nodes, smallest ``EvictionPolicy.rank(BlockView)`` first. What is
new (Penelope; ``bench/sim/gaps.py`` is the simulator's twin):

* with a policy whose ``needs.interior`` is set, every unlocked node with KV is
  a candidate, not only leaves. Freeing a node with children makes it hollow:
  its keys stay (matches run through it), its slots go back to the pool; a
  later insert through it or ``fill`` gives it slots again;
* a node with no children is removed when freed, and a hollow node left
  without children (no KV below it) is removed too, walking up the path, once
  no lock holds it;
* tail-only policies (``lru``, ``lfu``) are offered leaves only and never make
  a node hollow: their eviction is SGLang's;
* with a host tier (``HostCopies``, ``host_kv.py``) a freed node's KV is copied
  to host memory first and the node stays hollow (a leaf too) holding the copy
  (``host``); filling it drops the copy, and when the tier drops a copy for
  room (``host_dropped``) a node left useless is pruned.

``NOTE`` (invariants ``check()`` asserts; ``kv(n)`` = ``len(n.key)``, 0 when
hollow)::

    evictable_tokens = sum(kv(n) for unlocked n)   protected_tokens = locked
    hollow n  =>  n.children or n.lock_ref or n.host (no useless hollow node)
    n.host    =>  hollow n                          (a copy only of freed KV)
    candidates = {unlocked, non-hollow n; leaves only unless needs.interior}

Keys are ``RadixKey``-like (``match_at``, ``child_key_at``, slicing); values
are sliceable slot-index sequences; the tree frees slots through ``free``. It
imports nothing from SGLang or torch (``gap_cache.py`` binds it to SGLang).
"""

from __future__ import annotations

import heapq
import time
from typing import Any, Callable, Iterator, Optional

from policies.cache import BlockView, EvictionPolicy
from server.sglang.cache.gap_node import GapNode, HostCopies, merge_ranges

class GapTree:
    """Radix tree with hollow nodes and policy-ranked eviction (see module docs)."""

    def __init__(self, policy: EvictionPolicy, free: Callable[[Any], None], root_key: Any,
                 root_value: Any, page_size: int = 1, copy: Callable[[Any], Any] = lambda v: v,
                 clock: Callable[[], float] = time.monotonic,
                 host: Optional[HostCopies] = None) -> None:
        self.policy = policy
        self.host = host
        self.interior = policy.needs.interior
        self.free, self.copy, self.clock, self.page_size = free, copy, clock, page_size
        self.root = GapNode(None, root_key, root_value, 0, clock())
        self.root.lock_ref = 1  # NOTE: never evicted, never counted
        self.evictable_tokens = 0
        self.protected_tokens = 0
        self.candidates: set[GapNode] = set()

    # --------------------------------------------------------------- walking
    def walk(self, key: Any) -> list[GapNode]:
        """Nodes ``key`` runs through (root excluded), hollow ones included;
        the last is split so the path ends exactly where the match ends.
        Every node on the path is marked accessed now."""
        path: list[GapNode] = []
        node, offset, n = self.root, 0, len(key)
        now = self.clock()
        while offset + self.page_size <= n:
            child = node.children.get(key.child_key_at(offset, self.page_size))
            if child is None:
                break
            matched = child.key.match_at(key, offset, self.page_size)
            if matched == 0:
                break
            if matched < len(child.key):
                child = self._split(child, matched)
            child.last_access_time = now
            path.append(child)
            node, offset = child, offset + matched
        return path

    def path_to(self, node: GapNode) -> list[GapNode]:
        """Nodes from the root (excluded) down to ``node``."""
        path = []
        while node.parent is not None:
            path.append(node)
            node = node.parent
        path.reverse()
        return path

    def _split(self, node: GapNode, k: int) -> GapNode:
        """Split ``node`` after ``k`` tokens; return the new head (parent) node."""
        parent = node.parent
        assert parent is not None and 0 < k < len(node.key)
        head = GapNode(parent, node.key[:k], None if node.hollow else self.copy(node.value[:k]),
                       node.start, node.last_access_time, node.priority)
        head.creation_time, head.hit_count, head.lock_ref = node.creation_time, node.hit_count, node.lock_ref
        head.session, head.others = node.session, None if node.others is None else set(node.others)
        if node.host is not None:
            assert self.host is not None
            head.host, node.host = self.host.split(node.host, k, head, node)
        parent.children[node.key.child_key_at(0, self.page_size)] = head
        node.key = node.key[k:]
        node.value = None if node.hollow else self.copy(node.value[k:])
        node.start += k
        node.parent = head
        head.children[node.key.child_key_at(0, self.page_size)] = node
        self._update(head)
        self._update(node)
        return head

    # ---------------------------------------------------------------- insert
    def insert(self, key: Any, value: Any, priority: int = 0, session: Optional[str] = None,
               inserted_len: int = 0) -> tuple[int, GapNode, list[tuple[int, int]]]:
        """Cache ``key`` with slots ``value`` (one per token). Returns the tokens
        already in the tree (hollow ones included), the node the path ends in,
        and the ranges of ``value`` the tree adopted: hollow nodes it filled and
        the new leaf. NOTE: every other slot of ``value[:prefix_len]`` is a
        duplicate the caller still owns and frees."""
        path = self.walk(key)
        adopted: list[tuple[int, int]] = []
        for n in path:
            if n.hollow:
                self._fill(n, value[n.start:n.end])
                adopted.append((n.start, n.end))
            if n.end > inserted_len:
                n.hit_count += 1
            n.priority = max(n.priority, priority)
            self._add_session(n, session)
        node = path[-1] if path else self.root
        matched = node.end if path else 0
        if matched < len(key):
            now = node.last_access_time if path else self.clock()  # NOTE: one access per insert
            leaf = GapNode(node, key[matched:], self.copy(value[matched:len(key)]), matched,
                           now, priority)
            leaf.hit_count = 1
            leaf.session = session
            node.children[leaf.key.child_key_at(0, self.page_size)] = leaf
            self.evictable_tokens += len(leaf.key)
            adopted.append((matched, len(key)))
            self._update(node)
            self._update(leaf)
            node = leaf
        return matched, node, merge_ranges(adopted)

    def fill(self, node: GapNode, start: int, end: int, value: Any) -> list[tuple[int, int]]:
        """Give the hollow nodes covering token positions ``[start, end)`` on the
        path to ``node`` the slots ``value`` (one per token, from ``start``).
        Returns the ranges taken; a node filled meanwhile (another request's
        insert) keeps its slots, and the caller frees the rest of ``value``."""
        taken, covered = [], 0
        for n in self.path_to(node):
            if n.end <= start or n.start >= end:
                continue
            assert start <= n.start and n.end <= end, "a gap ends inside a node"
            covered += len(n.key)
            if n.hollow:
                self._fill(n, value[n.start - start:n.end - start])
                taken.append((n.start, n.end))
        assert covered == end - start, "the range is not on this path"
        return merge_ranges(taken)

    def _fill(self, n: GapNode, value: Any) -> None:
        assert len(value) == len(n.key)
        n.value = self.copy(value)
        if n.host is not None:
            assert self.host is not None
            self.host.drop(n.host)
            n.host = None
        if n.lock_ref:
            self.protected_tokens += len(n.key)
        else:
            self.evictable_tokens += len(n.key)
        self._update(n)
        if n.parent is not None:
            self._update(n.parent)

    # ----------------------------------------------------------------- locks
    def lock(self, node: GapNode) -> int:
        """Lock the path to ``node``; return the change in evictable tokens."""
        delta = 0
        while node.parent is not None:
            if node.lock_ref == 0:
                delta -= node.kv_tokens
            node.lock_ref += 1
            self._update(node)
            node = node.parent
        self.evictable_tokens += delta
        self.protected_tokens -= delta
        return delta

    def unlock(self, node: GapNode) -> int:
        """Release one ``lock`` of the path to ``node``; prune what it kept."""
        delta, n = 0, node
        while n.parent is not None:
            assert n.lock_ref > 0, "unlock without lock"
            n.lock_ref -= 1
            if n.lock_ref == 0:
                delta += n.kv_tokens
            self._update(n)
            n = n.parent
        self.evictable_tokens += delta
        self.protected_tokens -= delta
        self._prune(node)
        return delta

    # -------------------------------------------------------------- eviction
    def view(self, n: GapNode) -> BlockView:
        return BlockView(block_id=n.id, num_tokens=len(n.key), prefix_len=n.start,
                         last_access=n.last_access_time, created=n.creation_time,
                         hit_count=n.hit_count, priority=n.priority, num_children=len(n.children),
                         num_sessions=1 if n.others is None else 1 + len(n.others))

    def evict(self, num_tokens: int) -> int:
        """Free at least ``num_tokens`` slots if that many are evictable,
        smallest rank first (re-ranked as the tree changes); return the count."""
        rank = self.policy.rank
        heap = [(rank(self.view(n)), n.id, n) for n in self.candidates]
        heapq.heapify(heap)
        freed = 0
        while freed < num_tokens and heap:
            r, _, n = heapq.heappop(heap)
            if n not in self.candidates:
                continue
            current = rank(self.view(n))
            if current != r:  # NOTE: a rank that moved since it was pushed
                heapq.heappush(heap, (current, n.id, n))
                continue
            parent = n.parent
            assert parent is not None
            freed += len(n.key)
            handle = self.host.offload(n) if self.host is not None else None
            self.free(n.value)
            self.evictable_tokens -= len(n.key)
            n.value, n.host = None, handle
            if n.children or handle is not None:
                self._update(n)
                self._update(parent)
            else:
                self._remove(n)
                self._prune(parent)
            if parent in self.candidates:  # NOTE: new candidate, or its rank moved
                heapq.heappush(heap, (rank(self.view(parent)), parent.id, parent))
        return freed

    def host_dropped(self, n: GapNode) -> None:
        """The host tier dropped ``n``'s copy (for room): prune it if useless."""
        n.host = None
        self._prune(n)

    def _remove(self, n: GapNode) -> None:
        """Detach a childless node (its slots already freed)."""
        parent = n.parent
        assert parent is not None and not n.children and n.lock_ref == 0 and n.hollow \
            and n.host is None
        del parent.children[n.key.child_key_at(0, self.page_size)]
        n.parent = None
        self.candidates.discard(n)
        self._update(parent)

    def _prune(self, n: GapNode) -> None:
        """Remove ``n`` and its ancestors while hollow, childless, unlocked and
        without a host copy."""
        while (n.parent is not None and n.hollow and not n.children and n.lock_ref == 0
               and n.host is None):
            parent = n.parent
            self._remove(n)
            n = parent

    def _eligible(self, n: GapNode) -> bool:
        if n.parent is None or n.lock_ref or n.value is None:
            return False
        return self.interior or not n.children

    def _update(self, n: GapNode) -> None:
        if self._eligible(n):
            self.candidates.add(n)
        else:
            self.candidates.discard(n)

    @staticmethod
    def _add_session(n: GapNode, session: Optional[str]) -> None:
        if session is None or session == n.session:
            return
        if n.session is None:
            n.session = session
        elif n.others is None:
            n.others = {session}
        else:
            n.others.add(session)

    # ------------------------------------------------------------- integrity
    def nodes(self) -> Iterator[GapNode]:
        """Every node but the root."""
        stack = list(self.root.children.values())
        while stack:
            n = stack.pop()
            yield n
            stack.extend(n.children.values())

    def check(self) -> None:
        """Assert the module's invariants (tests call it after every step)."""
        evictable = protected = 0
        for n in self.nodes():
            parent = n.parent
            assert parent is not None and parent.children[n.key.child_key_at(0, self.page_size)] is n
            assert n.start == (parent.end if parent.parent is not None else 0)
            assert n.value is None or len(n.value) == len(n.key)
            assert not n.hollow or n.children or n.lock_ref or n.host is not None, \
                "useless hollow node"
            assert n.host is None or n.hollow, "a host copy of a node with device KV"
            assert parent.parent is None or parent.lock_ref >= n.lock_ref, "lock not on a path"
            assert self.interior or not n.hollow, "a tail-only policy left a gap"
            assert (n in self.candidates) == self._eligible(n)
            if n.lock_ref:
                protected += n.kv_tokens
            else:
                evictable += n.kv_tokens
        assert all(c.parent is not None for c in self.candidates)
        assert (evictable, protected) == (self.evictable_tokens, self.protected_tokens)
