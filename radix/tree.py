"""The gap tree: a radix tree of cached prefixes whose nodes can be *hollow*.

A node holds a run of key units that share one path and, unless hollow, the
KV of those units. As in SGLang's radix tree:

* a match runs down from the root and splits the node it ends inside, so
  matches end on node boundaries; an insert extends the path with one new
  leaf; a match or insert marks the path accessed (``last_access``; with
  ``touch_remainder`` the split-off remainder too, as SGLang's ``RadixCache``
  touches the partly matched child); ``hit_count`` counts the requests that
  inserted through a node (its creator included);
* a lock covers the whole path to a node (a running request's prefix);
* eviction frees whole unlocked nodes, smallest ``EvictionPolicy.rank`` first
  (``radix.eviction``), leaves only for a tail-only policy, re-ranking nodes
  that become evictable on the way (a parent whose last child went).

What is new (Penelope): a policy with ``needs.interior`` is offered interior
nodes too, and freeing a node with children makes it hollow: its keys stay
(matches run through it), its KV is freed; a later insert through it or
``fill`` gives it KV again. With a host tier the node keeps a host copy
instead (``radix.kv`` has every case). Tail-only policies without a host
tier never make a node hollow: their eviction is SGLang's.

``NOTE`` (invariants ``check`` asserts; ``kv(n)`` = ``n.num_tokens``, 0 when
hollow)::

    tree_tokens      = sum(kv(n) for every node)       protected = tree - evictable
    evictable_tokens = sum(kv(n) for unlocked n)
    hollow n  =>  n.children or n.on_host or n.lock_ref   (no useless hollow node)
    n.lock_ref <= n.parent.lock_ref                       (a lock covers a path)

The host binds keys (``KeyIndex``), optionally KV slots (``Slots``; without,
the tree counts tokens only) and a host tier; ``radix.bindings`` has the
contracts. Times are the host's (``now`` arguments): the tree reads no clock.

NOTE (size): ~330 lines, a tenth of them this contract; what happens to a
node's KV (``radix.kv``), the eviction heap (``radix.eviction``) and the checks
(``radix.check``) are already out. What stays is the tree's own walk, split,
insert, fill and locks, which keep its token counts together.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Generic

from policies.cache import BlockView, EvictionPolicy
from radix import kv
from radix.bindings import KeyIndex, Slots
from radix.check import check_tree
from radix.eviction import EvictionQueue
from radix.host import HostTier
from radix.node import Inserted, K, Node, V, merge_ranges


class GapTree(Generic[K, V]):
    """Radix tree with hollow nodes and policy-ranked eviction (see module docs)."""

    def __init__(self, policy: EvictionPolicy, keys: KeyIndex[K], root_key: K, *,
                 unit_tokens: int = 1, slots: Slots[V] | None = None,
                 host: HostTier | None = None, touch_waiting: bool = False,
                 touch_remainder: bool = True) -> None:
        self.policy = policy
        self.keys = keys
        self.unit_tokens = unit_tokens
        """Tokens per key unit (a block of ``unit_tokens``; the last may hold fewer)."""
        self.slots = slots
        self.host = host
        self.interior = policy.needs.interior
        """Interior nodes may be freed (made hollow), not only leaves."""
        self.touch_waiting = touch_waiting
        """Waiting requests' prefixes count as accessed at every pass."""
        self.touch_remainder = touch_remainder
        """A match that splits a node marks the split-off remainder accessed too
        (SGLang's ``RadixCache``; the simulator). NOTE: the gap cache does not:
        another session matching through a shared prefix would refresh the
        private history after it, which Penelope ranks by recency."""
        self.queue = EvictionQueue(policy, unit_tokens, self.interior)
        self._offer = self.queue.offer
        self._ids = itertools.count()
        self._sibling_keys = itertools.count()
        self.root: Node[K, V] = Node(next(self._ids), None, root_key, None, 0, 0, 0.0,
                                     next(self._sibling_keys))
        self.root.lock_ref = 1  # NOTE: the root is never evicted, never counted
        self.tree_tokens = 0
        self.evictable_tokens = 0
        self.num_nodes = 0
        self.num_evicted_tokens = 0

    @property
    def protected_tokens(self) -> int:
        """Tokens of locked nodes."""
        return self.tree_tokens - self.evictable_tokens

    @property
    def may_have_gaps(self) -> bool:
        """Whether any node can be hollow (an interior policy or a host tier)."""
        return self.interior or self.host is not None

    # ----------------------------------------------------------------- paths
    def path(self, node: Node[K, V]) -> Iterator[Node[K, V]]:
        """Nodes from ``node`` up to the root (excluded)."""
        while node.parent is not None:
            yield node
            node = node.parent

    def path_to(self, node: Node[K, V]) -> list[Node[K, V]]:
        """Nodes from the root (excluded) down to ``node``."""
        path = list(self.path(node))
        path.reverse()
        return path

    def prefix_path(self, node: Node[K, V]) -> tuple[int, ...]:
        """Sibling keys from the root down to ``node`` (``RequestView.prefix_path``)."""
        return self.prefix_paths((node,))[0]

    def prefix_paths(self, nodes: Iterable[Node[K, V] | None]) -> list[tuple[int, ...]]:
        """``prefix_path`` of each node (``()`` for ``None``), every shared ancestor's path built once.

        NOTE: a queue's requests share most of their paths (one conversation's
        turns, one system prompt): this walks each distinct node once, where
        one ``prefix_path`` per request walks every path from the root again.
        """
        memo: dict[Node[K, V], tuple[int, ...]] = {self.root: ()}
        get = memo.get
        out: list[tuple[int, ...]] = []
        for node in nodes:
            if node is None:
                out.append(())
                continue
            path = get(node)
            if path is None:
                chain: list[Node[K, V]] = []
                n: Node[K, V] | None = node
                while n is not None and n not in memo:
                    chain.append(n)
                    n = n.parent
                path = memo[n] if n is not None else ()  # NOTE: a detached node: its own chain
                for m in reversed(chain):
                    if m.parent is not None:  # NOTE: as path(): the root's own key is not on a path
                        path = (*path, m.sibling_key)
                    memo[m] = path
            out.append(path)
        return out

    def hollow_tokens(self, node: Node[K, V]) -> int:
        """Tokens of the hollow nodes on the path to ``node`` (its gaps)."""
        tokens = 0
        while node.parent is not None:
            if node.hollow:
                tokens += node.num_tokens
            node = node.parent
        return tokens

    def unlocked_tokens_on_path(self, node: Node[K, V]) -> int:
        """Tokens a lock on ``node`` would take out of the evictable pool."""
        tokens = 0
        while node.parent is not None:
            if node.lock_ref == 0 and not node.hollow:
                tokens += node.num_tokens
            node = node.parent
        return tokens

    def nodes(self) -> Iterator[Node[K, V]]:
        """Every node but the root."""
        stack = list(self.root.children.values())
        while stack:
            n = stack.pop()
            yield n
            stack.extend(n.children.values())

    def view(self, n: Node[K, V]) -> BlockView:
        """The ``BlockView`` the eviction policy ranks ``n`` by."""
        return self.queue.view(n)

    # ----------------------------------------------------------------- match
    def match(self, key: K, now: float, touch: bool = True,
              split: bool = True) -> tuple[int, Node[K, V]]:
        """``(units matched, node the match ends in)``, hollow nodes included.
        With ``split`` (SGLang's ``match_prefix``) the node is split so the match
        ends on its boundary; without, it may extend past the match. With
        ``touch`` the path (and, with ``touch_remainder``, a split-off
        remainder) is accessed at ``now``."""
        matched, node = self.keys.locate(self.root, key)
        if matched == 0:
            return 0, self.root
        if split and matched < node.end:
            rest = node
            node = self.split(node, matched - node.start)
            if touch and self.touch_remainder:
                self._set_access(rest, now)
        if touch:
            n = node
            while n.parent is not None:
                if n.last_access != now:
                    n.last_access = now
                    self._offer(n)
                n = n.parent
        return matched, node

    def split(self, node: Node[K, V], k: int) -> Node[K, V]:
        """Split ``node`` after its first ``k`` units; return the new head (parent)."""
        parent = node.parent
        units = len(node.key)
        assert parent is not None and 0 < k < units
        head_tokens = min(k * self.unit_tokens, node.num_tokens)
        head: Node[K, V] = Node(next(self._ids), parent, node.key[:k], node.edge, node.start,
                                head_tokens, node.last_access, node.sibling_key)
        head.created, head.hit_count, head.priority = node.created, node.hit_count, node.priority
        head.lock_ref, head.waiting_ref = node.lock_ref, node.waiting_ref
        head.hollow, head.on_host, head.host_stamp = node.hollow, node.on_host, node.host_stamp
        head.session, head.others = node.session, None if node.others is None else set(node.others)
        if self.slots is not None and node.value is not None:
            value = node.value
            head.value, node.value = self.slots.take(value, 0, k), self.slots.take(value, k, units)
        # NOTE: same edge, so the head keeps the node's place among its siblings
        parent.children[node.edge] = head
        node.key = node.key[k:]
        node.edge = self.keys.edge(node.key)
        node.start += k
        node.num_tokens -= head_tokens
        node.parent = head
        node.sibling_key = next(self._sibling_keys)
        head.children[node.edge] = node
        self.num_nodes += 1
        self.keys.split(head, node)
        if head.on_host:
            assert self.host is not None
            self.host.split(head, node, k)
        self._offer(node)
        if self.interior:
            self._offer(head)  # NOTE: an interior node is a candidate too
        return head

    # ---------------------------------------------------------------- insert
    def insert(self, key: K, now: float, *, num_tokens: int | None = None,
               value: V | None = None, inserted: int = 0, priority: int = 0,
               session: str | None = None) -> Inserted[K, V]:
        """Cache ``key`` (``num_tokens`` tokens; default one unit's worth per
        unit) with KV ``value`` (one slot per unit, if slots are bound). The
        first ``inserted`` units are the request's own earlier insert: not
        counted as hits again, and their hollow nodes (none: the request holds
        them locked) are not filled. Hollow nodes after them take ``value``'s KV."""
        matched, node = self.match(key, now)
        slots = self.slots
        adopted: list[tuple[int, int]] = []
        n = node
        while n.parent is not None:
            if n.start + len(n.key) > inserted:
                n.hit_count += 1
                if n.hollow:
                    assert slots is None or value is not None, "a gap needs the inserted KV"
                    kv.fill_node(self, n, None if slots is None or value is None
                                 else slots.take(value, n.start, n.end))
                    adopted.append((n.start, n.end))
            if session is not None and session != n.session:
                n.add_session(session)
            if priority > n.priority:
                n.priority = priority
            n.last_access = now
            self._offer(n)  # NOTE: its rank may have changed: re-rank it
            n = n.parent
        if len(adopted) > 1:
            adopted = merge_ranges(reversed(adopted))
        units = len(key)
        if matched == units:
            return Inserted(matched, node, 0, adopted)
        total = units * self.unit_tokens if num_tokens is None else num_tokens
        tokens = total - min(matched * self.unit_tokens, total)
        assert slots is None or value is not None, "a new leaf needs the inserted KV"
        leaf: Node[K, V] = Node(next(self._ids), node, key[matched:], None, matched, tokens, now,
                                next(self._sibling_keys),
                                None if slots is None or value is None else slots.take(value, matched, units))
        leaf.edge = self.keys.edge(leaf.key)
        leaf.hit_count = 1
        leaf.priority = priority
        leaf.session = session
        was_leaf = not node.children
        node.children[leaf.edge] = leaf
        self.num_nodes += 1
        self.keys.attached(leaf)
        self.tree_tokens += tokens
        self.evictable_tokens += tokens
        if self.interior:
            self._offer(node)  # NOTE: still a candidate; its rank may see the new child
        elif was_leaf:
            node.version += 1  # NOTE: no longer a leaf: its heap entries are stale
        self._offer(leaf)
        if adopted and adopted[-1][1] == matched:
            adopted[-1] = (adopted[-1][0], units)
        else:
            adopted.append((matched, units))
        return Inserted(matched, leaf, tokens, adopted)

    def fill(self, node: Node[K, V], value: V | None = None, start: int = 0,
             end: int | None = None, *, restore: bool = False) -> list[Node[K, V]]:
        """Give the hollow nodes on the path to ``node`` (locked by the caller,
        who made room) their KV back: all of them, or those covering units
        ``[start, end)`` with ``value`` (one slot per unit from ``start``).
        Returns the nodes filled, in path order (``radix.kv.fill``)."""
        return kv.fill(self, node, value, start, end, restore)

    # ----------------------------------------------------------------- locks
    def lock(self, node: Node[K, V]) -> int:
        """Protect the path to ``node`` from eviction; return the change in
        evictable tokens (<= 0)."""
        delta = 0
        while node.parent is not None:
            if node.lock_ref == 0:
                delta -= node.kv_tokens
            node.lock_ref += 1
            node = node.parent
        self.evictable_tokens += delta
        return delta

    def unlock(self, node: Node[K, V]) -> int:
        """Release one ``lock`` of the path to ``node``; return the change in
        evictable tokens (>= 0)."""
        delta, n = 0, node
        while n.parent is not None:
            n.lock_ref -= 1
            assert n.lock_ref >= 0, "unlock without lock"
            if n.lock_ref == 0:
                delta += n.kv_tokens
                self._offer(n)
            n = n.parent
        self.evictable_tokens += delta
        if node.hollow:
            # NOTE: a hollow node whose host copy was dropped while it was locked
            # is useless once unlocked (no KV, no copy, nothing after it)
            kv.prune(self, node)
        return delta

    def add_waiter(self, node: Node[K, V]) -> None:
        """A waiting request's match now runs through the path to ``node``."""
        if self.touch_waiting:
            self.queue.add_waiter(self.path(node))

    def remove_waiter(self, node: Node[K, V]) -> None:
        """Undo ``add_waiter``; the path keeps the recency it was touched with."""
        if self.touch_waiting:
            self.queue.remove_waiter(self.path(node))

    def touch_waiting_prefixes(self, now: float) -> None:
        """A scheduling pass touched every waiting request's matched prefix."""
        self.queue.touch_time = now

    # -------------------------------------------------------------- eviction
    def evict(self, num_tokens: int) -> int:
        """Free at least ``num_tokens`` tokens of KV if that many are evictable
        (whole nodes, smallest rank first; ``radix.kv``); return the tokens freed."""
        return kv.evict(self, num_tokens)

    def _set_access(self, n: Node[K, V], now: float) -> None:
        if n.last_access != now:
            n.last_access = now
            self._offer(n)

    # ------------------------------------------------------------- integrity
    def check(self) -> None:
        """Assert the invariants (module docs, ``radix.check``); tests call it after every step."""
        check_tree(self)
