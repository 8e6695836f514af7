"""Gaps in the simulated prefix cache: hollow nodes, refilling them, and the
host tier (``PrefixCache`` inherits these; see ``bench/sim/cache.py``'s docs).

* ``_free`` frees an evictable node's KV: to the host tier if there is one
  (keys kept, restorable), hollow if it has children (a gap), else removed;
* ``_prune`` removes hollow nodes that became useless (no children, no host
  copy, unlocked), walking up the path;
* ``fill_path`` gives a request's hollow path nodes their KV back when it is
  admitted, and says which gaps it recomputes and how much the host restored.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING, Callable, Iterator, Optional

from bench.sim.host_tier import HostTier

if TYPE_CHECKING:
    from bench.sim.cache import Node


class GapsMixin:
    """Hollow nodes and the host tier, as part of ``PrefixCache``."""

    block_size: int
    hollows: bool
    host: Optional[HostTier]
    tree_tokens: int
    evictable_tokens: int
    _seen: set[int]
    _touched_leaves: set["Node"]
    path: Callable[["Node"], Iterator["Node"]]
    tokens_of: Callable[[int, int], int]
    _offer: Callable[["Node"], None]
    _remove_leaf: Callable[["Node"], int]

    @property
    def may_have_gaps(self) -> bool:
        """Whether any node can be hollow (hollowing policy or a host tier)."""
        return self.hollows or self.host is not None

    def seen_tokens(self, blocks: Optional[array], input_tokens: int) -> int:
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

    def hollow_tokens(self, node: Node) -> int:
        """Tokens of the hollow nodes on the path to ``node`` (its gaps)."""
        return sum(n.num_tokens for n in self.path(node) if n.hollow)

    def fill_path(self, node: Node) -> tuple[list[tuple[int, int]], int]:
        """Give the hollow nodes on the path to ``node`` their KV back (the
        caller made room for ``hollow_tokens(node)`` slots and holds a lock on
        the path). Return the gaps to recompute, ``(tokens, start position)``
        in path order with adjacent nodes merged, and the tokens restored from
        the host tier instead."""
        gaps: list[tuple[int, int]] = []
        restored = 0
        for n in reversed(list(self.path(node))):
            if not n.hollow:
                continue
            if n.on_host:
                restored += n.num_tokens
            else:
                start = n.start * self.block_size
                if gaps and gaps[-1][0] + gaps[-1][1] == start:
                    gaps[-1] = (gaps[-1][0] + n.num_tokens, gaps[-1][1])
                else:
                    gaps.append((n.num_tokens, start))
            self._fill(n)
        if self.host is not None:
            self.host.num_restored_tokens += restored
        return gaps, restored

    def _fill(self, n: Node) -> None:
        """A hollow node gets its KV back (recomputed, restored or inserted)."""
        if self.host is not None:
            self.host.discard(n)
        n.hollow = False
        self.tree_tokens += n.num_tokens
        if n.lock_ref == 0:
            self.evictable_tokens += n.num_tokens
        self._offer(n)


    def _free(self, node: Node) -> int:
        """Free an evictable node's KV: to the host tier (keys kept), hollow
        (an interior node), or removed (a leaf); return the tokens freed."""
        tokens = node.num_tokens
        if self.host is not None and self.host.fits(tokens):
            self._hollow(node)
            for dropped in self.host.add(node):
                self._prune(dropped)
            return tokens
        if node.children:
            self._hollow(node)
            return tokens
        parent = node.parent
        freed = self._remove_leaf(node)
        if self.hollows:
            assert parent is not None
            self._prune(parent)
        return freed

    def _hollow(self, node: Node) -> None:
        node.hollow = True
        node.version += 1
        self.tree_tokens -= node.num_tokens
        self.evictable_tokens -= node.num_tokens
        self._touched_leaves.discard(node)
        assert node.parent is not None
        self._offer(node.parent)  # NOTE: may have become a leaf of KV

    def _prune(self, n: Node) -> None:
        """Remove ``n`` and then its ancestors while they are useless: hollow,
        childless, without a host copy, unlocked."""
        while (n.parent is not None and n.attached and n.hollow and not n.on_host
               and not n.children and n.lock_ref == 0):
            parent = n.parent
            self._remove_leaf(n)
            n = parent
