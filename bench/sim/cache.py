"""The simulated prefix cache: SGLang's radix tree over prefix blocks.

A node holds a run of block ids (SGLang: a run of tokens) that share one path;
a request's cached prefix is the path from the root to the node its match ends
in. As in SGLang's ``RadixCache``:

* matching splits a node where a match ends, so matches end on node
  boundaries; inserting extends a path with one new leaf node;
* a request locks the path of its prefix while it runs (``lock_ref``); only
  unlocked *leaves* are evicted, whole, smallest eviction rank first, and a
  parent whose last child went becomes a candidate in turn;
* ``last_access`` is refreshed along a matched or inserted path; ``hit_count``
  counts the requests that inserted through a node (its creator included).

Block ids are prefix-chained (``bench.traces.trace``), so a block id names its
whole prefix: ``_node_of`` maps every cached block to its node, a match is a
binary search over the request's blocks, and the cached set is prefix-closed.

Gaps (Penelope; the methods are in ``bench/sim/gaps.py``): a policy with
``needs.interior`` is offered unlocked *interior* nodes too, and freeing one
makes it *hollow*: its keys stay (matches still run through it), its KV is
freed. A match through hollow nodes has a cached prefix, gap(s) and a cached
tail; the request recomputes only the gaps (``fill_path``). With a host tier
(``host_tier.HostTier``) a freed node keeps its keys and a host copy instead,
and is restored rather than recomputed. A hollow node with no children and no
host copy is useless and is removed (with hollow ancestors left childless).
Tail-only policies without a host tier never make a node hollow, so their
behaviour is exactly the tail-only radix tree above.

Token accounting (``NOTE``: the invariants ``check()`` asserts; ``kv(n)`` is
``n.num_tokens``, or 0 for a hollow node)::

    tree_tokens      = sum(kv(node) for every cached node)
    evictable_tokens = sum(kv(node) for nodes with lock_ref == 0)
"""

from __future__ import annotations

import itertools
from array import array
from typing import Callable, Iterator, Optional

from bench.sim.eviction import EvictionMixin
from bench.sim.gaps import GapsMixin
from bench.sim.host_tier import HostTier
from policies.cache import EvictionPolicy


class Node:
    """One radix-tree node (see module docs)."""

    __slots__ = ("id", "parent", "children", "blocks", "start", "num_tokens", "lock_ref",
                 "waiting_ref", "last_access", "created", "hit_count", "priority",
                 "sibling_key", "version", "attached", "hollow", "on_host", "host_stamp",
                 "session", "others")

    def __init__(self, node_id: int, parent: Optional["Node"], blocks: array, start: int,
                 num_tokens: int, now: float, sibling_key: int) -> None:
        self.id = node_id
        self.parent = parent
        self.children: dict[int, Node] = {}
        self.blocks = blocks
        self.start = start
        """Index of the node's first block in every sequence through it."""
        self.num_tokens = num_tokens
        self.lock_ref = 0
        self.waiting_ref = 0
        """Waiting requests whose matched prefix runs through this node."""
        self.last_access = now
        self.created = now
        self.hit_count = 0
        self.priority = 0
        self.sibling_key = sibling_key
        """Orders siblings as SGLang's insertion-ordered ``children`` dict."""
        self.version = 0
        self.attached = True
        self.hollow = False
        """Keys kept, KV freed (see module docs)."""
        self.on_host = False
        """A hollow node whose KV the host tier holds."""
        self.host_stamp = 0
        self.session: Optional[str] = None
        """First session that inserted through the node."""
        self.others: Optional[set[str]] = None
        """Other sessions that did."""

    @property
    def kv_tokens(self) -> int:
        """KV slots the node owns (0 when hollow)."""
        return 0 if self.hollow else self.num_tokens

    @property
    def end(self) -> int:
        """Index one past the node's last block."""
        return self.start + len(self.blocks)


class PrefixCache(EvictionMixin, GapsMixin):
    """Radix tree of prefix blocks with locks and policy-ranked eviction."""

    def __init__(self, block_size: int, policy: EvictionPolicy, touch_waiting: bool = False,
                 host: Optional[HostTier] = None) -> None:
        self.block_size = block_size
        self.policy = policy
        self.hollows = policy.needs.interior
        """Interior nodes may be freed (made hollow), not only leaves."""
        self.host = host
        """The host tier freed nodes go to, if any."""
        self.touch_waiting = touch_waiting
        """Waiting requests' prefixes count as accessed at every pass."""
        self._ids = itertools.count()
        self._keys = itertools.count()
        self.root = Node(next(self._ids), None, array("q"), 0, 0, 0.0, next(self._keys))
        self.root.lock_ref = 1  # NOTE: the root is never evicted
        self._node_of: dict[int, Node] = {}
        self._seen: set[int] = set()
        """Every block ever inserted (``seen_tokens``)."""
        self.tree_tokens = 0
        self.evictable_tokens = 0
        self.touch_time = 0.0
        """Time of the latest pass that touched waiting prefixes."""
        self._heap: list[tuple[tuple, int, int, Node]] = []
        self._touched_leaves: set[Node] = set()
        self.num_nodes = 0
        self.on_evict: Optional[Callable[[Node], None]] = None
        """Called with each evicted node (the host re-matches its waiters)."""
        self.on_insert: Optional[Callable[[int], None]] = None
        """Called with the first block of each new leaf."""
        self.num_evicted_tokens = 0

    # ----------------------------------------------------------------- match
    def match(self, blocks: Optional[array], now: float, touch: bool = True,
              split: bool = True) -> tuple[int, Node]:
        """``(matched blocks, node the match ends in)``. With ``split`` (what
        SGLang's ``match_prefix`` does) the node is split so the match ends on
        its boundary; without, the node returned may extend past the match.
        With ``touch`` the matched path (and a split-off remainder, as SGLang
        touches the partly matched child) is marked accessed at ``now``."""
        if not blocks:
            return 0, self.root
        node_of = self._node_of
        lo, hi = 0, len(blocks)
        if blocks[0] not in node_of:
            return 0, self.root
        # NOTE: prefix-closed cache + chained ids: membership is monotone.
        if blocks[hi - 1] in node_of:
            lo = hi
        else:
            lo = 1
            while lo < hi:
                mid = (lo + hi) // 2
                if blocks[mid] in node_of:
                    lo = mid + 1
                else:
                    hi = mid
        node = node_of[blocks[lo - 1]]
        if split and lo < node.end:
            rest = node
            node = self._split(node, lo - node.start)
            if touch:
                self._set_access(rest, now)
        if touch:
            self._touch_path(node, now)
        return lo, node

    def tokens_of(self, num_blocks: int, input_tokens: int) -> int:
        """Tokens the first ``num_blocks`` blocks of a prompt cover."""
        return min(num_blocks * self.block_size, input_tokens)

    def path(self, node: Node) -> Iterator[Node]:
        """Nodes from ``node`` up to the root (excluded)."""
        while node.parent is not None:
            yield node
            node = node.parent

    def prefix_path(self, node: Node) -> tuple[int, ...]:
        """``RequestView.prefix_path`` of a match ending in ``node``."""
        keys = [n.sibling_key for n in self.path(node)]
        keys.reverse()
        return tuple(keys)

    def unlocked_tokens_on_path(self, node: Node) -> int:
        """Tokens a lock on ``node`` would take out of the evictable pool."""
        return sum(n.kv_tokens for n in self.path(node) if n.lock_ref == 0)

    # ---------------------------------------------------------------- insert
    def insert(self, blocks: array, input_tokens: int, now: float, inserted_blocks: int = 0,
               priority: int = 0, session: Optional[str] = None) -> tuple[Node, int]:
        """Cache ``blocks`` (a prompt's leading blocks); return the node the path
        ends in and the tokens newly added to the tree. ``inserted_blocks``: how
        many of them this request inserted before (not counted as hits again).
        A hollow node past ``inserted_blocks`` takes the request's own KV."""
        matched, node = self.match(blocks, now, touch=True)
        for n in self.path(node):
            if n.end > inserted_blocks:
                n.hit_count += 1
                if n.hollow:
                    self._fill(n)
            if session is not None and session != n.session:
                if n.session is None:
                    n.session = session
                elif n.others is None:
                    n.others = {session}
                else:
                    n.others.add(session)
            n.priority = max(n.priority, priority)
            n.last_access = now
            self._offer(n)  # NOTE: its rank may have changed: re-rank it
        if matched == len(blocks):
            return node, 0
        tail = blocks[matched:]
        tokens = self.tokens_of(len(blocks), input_tokens) - self.tokens_of(matched, input_tokens)
        leaf = Node(next(self._ids), node, tail, matched, tokens, now, next(self._keys))
        leaf.hit_count = 1
        leaf.priority = priority
        leaf.session = session
        was_leaf = not node.children
        node.children[tail[0]] = leaf
        self.num_nodes += 1
        for b in tail:
            self._node_of[b] = leaf
        self._seen.update(tail)
        self.tree_tokens += tokens
        self.evictable_tokens += tokens
        if self.hollows:
            self._offer(node)  # NOTE: still a candidate; its rank may see the new child
        elif was_leaf:
            node.version += 1  # NOTE: no longer a leaf: its heap entries are stale
        self._offer(leaf)
        if self.on_insert is not None:
            self.on_insert(tail[0])
        return leaf, tokens

    def _split(self, node: Node, k: int) -> Node:
        """Split ``node`` after its first ``k`` blocks; return the new prefix node."""
        parent = node.parent
        assert parent is not None and 0 < k < len(node.blocks)
        head_tokens = min(k * self.block_size, node.num_tokens)
        head = Node(next(self._ids), parent, node.blocks[:k], node.start, head_tokens,
                    node.last_access, node.sibling_key)
        head.created, head.hit_count, head.priority = node.created, node.hit_count, node.priority
        head.lock_ref, head.waiting_ref = node.lock_ref, node.waiting_ref
        head.hollow, head.on_host, head.host_stamp = node.hollow, node.on_host, node.host_stamp
        head.session, head.others = node.session, None if node.others is None else set(node.others)
        # NOTE: same dict key, so the head keeps the child's place among siblings.
        parent.children[node.blocks[0]] = head
        node.blocks = node.blocks[k:]
        node.start += k
        node.num_tokens -= head_tokens
        node.parent = head
        node.sibling_key = next(self._keys)
        head.children[node.blocks[0]] = node
        self.num_nodes += 1
        for b in head.blocks:
            self._node_of[b] = head
        if head.on_host:
            assert self.host is not None
            self.host.split(head)
        self._offer(node)
        if self.hollows:
            self._offer(head)  # NOTE: an interior node is a candidate too
        return head

    # ------------------------------------------------------------------ locks
    def lock(self, node: Node) -> None:
        """Protect the path to ``node`` from eviction (a running request)."""
        for n in self.path(node):
            if n.lock_ref == 0:
                self.evictable_tokens -= n.kv_tokens
            n.lock_ref += 1

    def unlock(self, node: Node) -> None:
        """Release one ``lock`` of the path to ``node``."""
        for n in self.path(node):
            n.lock_ref -= 1
            assert n.lock_ref >= 0, "unlock without lock"
            if n.lock_ref == 0:
                self.evictable_tokens += n.kv_tokens
                self._offer(n)
        if node.hollow:
            # NOTE: a hollow node whose host copy was dropped while it was locked
            # is useless once unlocked (no KV, no copy, nothing after it)
            self._prune(node)

    def add_waiter(self, node: Node) -> None:
        """A waiting request's match now runs through ``node``'s path."""
        if not self.touch_waiting:
            return
        for n in self.path(node):
            n.waiting_ref += 1
            if n.waiting_ref == 1 and self._is_evictable(n):
                self._touched_leaves.add(n)

    def remove_waiter(self, node: Node) -> None:
        """Undo ``add_waiter``; the path keeps the recency it was touched with."""
        if not self.touch_waiting:
            return
        for n in self.path(node):
            n.waiting_ref -= 1
            if n.waiting_ref == 0:
                self._touched_leaves.discard(n)
                n.last_access = max(n.last_access, self.touch_time)
                self._offer(n)

    def touch_waiting_prefixes(self, now: float) -> None:
        """A scheduling pass touched every waiting request's matched prefix."""
        self.touch_time = now

    # ------------------------------------------------------------- integrity
    def nodes(self) -> Iterator[Node]:
        """Every cached node (root excluded)."""
        stack = list(self.root.children.values())
        while stack:
            n = stack.pop()
            yield n
            stack.extend(n.children.values())

    def check(self) -> None:
        """Assert the token and lock invariants (tests call this after steps)."""
        tree = evictable = count = blocks = 0
        for n in self.nodes():
            assert n.attached and n.parent is not None and n.lock_ref >= 0
            assert n.parent.children[n.blocks[0]] is n
            assert all(self._node_of[b] is n for b in n.blocks)
            assert n.start == n.parent.end, "node does not continue its parent"
            count += 1
            blocks += len(n.blocks)
            tree += n.kv_tokens
            evictable += n.kv_tokens if n.lock_ref == 0 else 0
            assert not n.on_host or n.hollow, "a host copy of a node with device KV"
            assert not n.hollow or n.on_host or n.children or n.lock_ref, "useless hollow node"
            # NOTE: a lock covers the whole path, so a parent is locked at least as often.
            assert n.parent is self.root or n.parent.lock_ref >= n.lock_ref, "lock not on a path"
        assert count == self.num_nodes and blocks == len(self._node_of)
        assert tree == self.tree_tokens, (tree, self.tree_tokens)
        assert evictable == self.evictable_tokens, (evictable, self.evictable_tokens)
        if self.host is not None:
            assert self.host.held(self.nodes()) == self.host.used <= self.host.capacity
