"""The simulated prefix cache: the gap tree (``radix``) bound to prefix blocks.

``radix.GapTree`` is the radix tree both hosts run (matching and splitting,
locks, policy-ranked eviction, hollow nodes, the host tier's accounting, the
invariants). This module binds it to the simulator:

* keys are runs of block ids (SGLang: runs of tokens); a unit is a block of
  ``block_size`` tokens, the prompt's last one possibly partial, so a node
  counts tokens (``num_tokens``) and holds no slots: the simulator tracks
  token counts, not KV;
* block ids are prefix-chained (``bench.traces.trace``), so a block id names
  its whole prefix: ``_node_of`` maps every cached block to its node (kept
  current through the tree's ``KeyIndex`` hooks, which ``PrefixCache``
  implements), a match is a binary search over the request's blocks, and the
  cached set is prefix-closed;
* the host tier (``cache.host_tier_tokens``) is accounting only; restoring
  costs ``restore_s`` at ``host_bandwidth_gbs``; a kind's levels below the
  device (``HostLevels``: memory and SSD) bring their own tier and price
  their own restores;
* ``on_evict`` (a node left the tree) and ``on_insert`` (first block of a new
  leaf) tell the waiting queue which matches may have changed.

A request whose match runs through hollow nodes recomputes only those gaps
(``fill_path``) and reuses the cached tail; tail-only policies without a host
tier never make a node hollow, so they run SGLang's tail-only radix tree.

``NOTE`` (``check``): besides the tree's invariants, ``_node_of`` maps exactly
the blocks of the tree's nodes, each to its node.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator
from typing import Protocol, cast

from policies.cache import BlockView, EvictionPolicy
from radix import GapTree, HostTier
from radix import Node as TreeNode

Node = TreeNode["array[int]", None]  # NOTE: a string: array is not subscriptable at run time before 3.12
"""A node of the simulated cache (block-id keys, no slots)."""


class _Match(Protocol):
    """``GapTree.match`` as ``PrefixCache.match``: ``key`` may be ``None`` (no blocks)."""

    def __call__(self, key: array[int] | None, now: float, touch: bool = True,
                 split: bool = True) -> tuple[int, Node]: ...


class HostLevels(Protocol):
    """A kind's host tier below the device (``SimParts.host_levels``), built per simulator."""

    def bind(self, clock: Callable[[], float], device_tokens: int, kv_bytes_per_token: float,
             unit_tokens: int) -> HostTier:
        """The tier the cache holds freed KV in, for a ``device_tokens`` pool whose tree nodes count
        ``unit_tokens`` per key unit; ``clock``: the simulator's time."""
        ...

    def restoring(self, nodes: list[Node]) -> None:
        """``nodes`` (held, hollow, in path order) are about to be restored to the device."""
        ...

    def take_restore_s(self) -> float:
        """Seconds the restores since the last call take (their prefill pass waits for them)."""
        ...


class PrefixCache:
    """The gap tree over prefix blocks, with a block-id index (see module docs)."""

    def __init__(self, block_size: int, policy: EvictionPolicy, touch_waiting: bool = False,
                 host_tier_tokens: int = 0, host_bandwidth_gbs: float = 0.0,
                 levels: tuple[HostLevels, HostTier] | None = None) -> None:
        self.block_size = block_size
        self.policy = policy
        self.host_bandwidth_gbs = host_bandwidth_gbs
        """Restore bandwidth of the host tier (``restore_s``)."""
        self._node_of: dict[int, Node] = {}
        self._seen: set[int] = set()
        """Every block ever inserted (``seen_tokens``)."""
        self.on_evict: Callable[[Node], None] | None = None
        """Called with each node that leaves the tree (the host re-matches its waiters)."""
        self.on_insert: Callable[[int], None] | None = None
        """Called with the first block of each new leaf."""
        self.levels = levels[0] if levels is not None else None
        """A kind's levels below the device (they price restores; ``None``: ``host_bandwidth_gbs``)."""
        # NOTE: at most one tier: a kind's levels, or a token count (build_simulator)
        host = levels[1] if levels is not None else HostTier(host_tier_tokens) if host_tier_tokens > 0 else None
        self.tree: GapTree[array[int], None] = GapTree(policy, self, array("q"), unit_tokens=block_size,
                                                   host=host, touch_waiting=touch_waiting)
        self.root = self.tree.root
        self.may_have_gaps = self.tree.may_have_gaps
        """Whether any node can be hollow (hollowing policy or a host tier)."""
        # NOTE: the tree's own operations, bound as they are (no forwarding frame
        # on the simulator's hot path; see ``GapTree`` for their docs)
        # NOTE: invariant: the tree's match hands its key only to ``locate`` below, which
        # answers ``(0, root)`` for ``None`` (a request without blocks), so it takes ``None``.
        self.match = cast(_Match, self.tree.match)
        self.lock = self.tree.lock
        self.unlock = self.tree.unlock
        self.evict = self.tree.evict
        self.add_waiter = self.tree.add_waiter
        self.remove_waiter = self.tree.remove_waiter
        self.path = self.tree.path
        self.hollow_tokens = self.tree.hollow_tokens
        self.unlocked_tokens_on_path = self.tree.unlocked_tokens_on_path
        self.prefix_paths = self.tree.prefix_paths

    # ----------------------------------------------------------- tree state
    @property
    def tree_tokens(self) -> int:
        """Tokens of KV the cache holds."""
        return self.tree.tree_tokens

    @property
    def evictable_tokens(self) -> int:
        """Tokens of KV no running request locks."""
        return self.tree.evictable_tokens

    @property
    def num_nodes(self) -> int:
        return self.tree.num_nodes

    @property
    def num_evicted_tokens(self) -> int:
        return self.tree.num_evicted_tokens

    @property
    def host(self) -> HostTier | None:
        """The host tier's accounting, if there is one."""
        return self.tree.host

    @property
    def touch_waiting(self) -> bool:
        """Waiting requests' prefixes count as accessed at every pass."""
        return self.tree.touch_waiting

    @touch_waiting.setter
    def touch_waiting(self, value: bool) -> None:
        self.tree.touch_waiting = value

    def nodes(self) -> Iterator[Node]:
        """Every cached node (root excluded)."""
        return self.tree.nodes()

    def view(self, n: Node) -> BlockView:
        """The ``BlockView`` the eviction policy ranks ``n`` by."""
        return self.tree.view(n)

    # ------------------------------------------------------------ operations
    def tokens_of(self, num_blocks: int, input_tokens: int) -> int:
        """Tokens the first ``num_blocks`` blocks of a prompt cover."""
        return min(num_blocks * self.block_size, input_tokens)

    def insert(self, blocks: array[int], input_tokens: int, now: float, inserted_blocks: int = 0,
               priority: int = 0, session: str | None = None, final: bool = True) -> tuple[Node, int]:
        """Cache ``blocks`` (a prompt's leading blocks); return the node the path
        ends in and the tokens of the new leaf. ``inserted_blocks``: how many of
        them this request inserted before (not counted as hits again). A hollow
        node past ``inserted_blocks`` takes the request's own KV. ``final``: the
        prompt is whole (else a chunk's end; ``hybrid.HybridCache`` tells them apart)."""
        done = self.tree.insert(blocks, now, num_tokens=self.tokens_of(len(blocks), input_tokens),
                                inserted=inserted_blocks, priority=priority, session=session)
        if done.prefix_len < len(blocks) and self.on_insert is not None:
            self.on_insert(blocks[done.prefix_len])
        return done.node, done.num_new_tokens

    def fill_path(self, node: Node) -> tuple[list[tuple[int, int]], int]:
        """Give the hollow nodes on the path to ``node`` their KV back (the
        caller made room for ``hollow_tokens(node)`` slots and holds a lock on
        the path). Return the gaps to recompute, ``(tokens, start position)``
        in path order with adjacent nodes merged, and the tokens restored from
        the host tier instead."""
        gaps: list[tuple[int, int]] = []
        restored = 0
        held: list[Node] = []
        for n in self.tree.path_to(node):
            if not n.hollow:
                continue
            if n.on_host:
                restored += n.num_tokens
                held.append(n)
                continue
            start = n.start * self.block_size
            if gaps and gaps[-1][0] + gaps[-1][1] == start:
                gaps[-1] = (gaps[-1][0] + n.num_tokens, gaps[-1][1])
            else:
                gaps.append((n.num_tokens, start))
        if held and self.levels is not None:
            self.levels.restoring(held)  # NOTE: before the fill drops the copies it reads
        self.tree.fill(node, restore=True)
        return gaps, restored

    def take_resume_s(self, blocks: array[int] | None, k: int, now: float) -> float:
        """Seconds before its prefill a request admitted at ``blocks[:k]`` waits to resume from
        its match (a hybrid model's snapshot read back: ``hybrid.HybridCache``); 0 here."""
        return 0.0

    def touch_waiting_prefixes(self, now: float) -> None:
        """A scheduling pass touched every waiting request's matched prefix."""
        self.tree.touch_waiting_prefixes(now)

    def seen_tokens(self, blocks: array[int] | None, input_tokens: int) -> int:
        """Tokens of the longest prefix of ``blocks`` ever inserted (cached now or
        before): what an unbounded cache would hold of this prompt."""
        if not blocks or blocks[0] not in self._seen:
            return 0
        lo, hi = 1, len(blocks)
        while lo < hi:  # NOTE: the inserted set is prefix-closed: membership is monotone
            mid = (lo + hi + 1) // 2
            if blocks[mid - 1] in self._seen:
                lo = mid
            else:
                hi = mid - 1
        return self.tokens_of(lo, input_tokens)

    def restore_s(self, tokens: int, kv_bytes_per_token: float) -> float:
        """Seconds to copy ``tokens`` of KV back from the host tier (with ``levels``: what the
        restores since the last call cost, as they priced them in ``fill_path``)."""
        if self.levels is not None:
            return self.levels.take_restore_s()
        return tokens * kv_bytes_per_token / (self.host_bandwidth_gbs * 1e9)

    # ------------------------------------------------- KeyIndex (tree hooks)
    def edge(self, key: array[int]) -> int:
        return key[0]

    def locate(self, root: Node, blocks: array[int] | None) -> tuple[int, Node]:
        """Binary search over prefix-chained block ids (see module docs)."""
        if not blocks:
            return 0, root
        node_of = self._node_of
        lo, hi = 0, len(blocks)
        if blocks[0] not in node_of:
            return 0, root
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
        return lo, node_of[blocks[lo - 1]]

    def attached(self, node: Node) -> None:
        for b in node.key:
            self._node_of[b] = node
        self._seen.update(node.key)

    def split(self, head: Node, tail: Node) -> None:
        for b in head.key:
            self._node_of[b] = head

    def detached(self, node: Node) -> None:
        for b in node.key:
            del self._node_of[b]
        if self.on_evict is not None:
            self.on_evict(node)

    # ------------------------------------------------------------- integrity
    def check(self) -> None:
        """Assert the tree's invariants and the index's (tests call this after steps)."""
        self.tree.check()
        blocks = 0
        for n in self.tree.nodes():
            assert all(self._node_of[b] is n for b in n.key)
            blocks += len(n.key)
        assert blocks == len(self._node_of)
