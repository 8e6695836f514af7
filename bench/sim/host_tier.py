"""A host-memory (CPU) second tier for KV segments the device cache freed.

Holds hollow cache nodes (``bench.sim.cache``: keys kept, device KV freed)
whose KV was copied to host memory when they were freed, up to
``capacity`` tokens, dropping the oldest copy first. A request whose match
runs through a node held here restores it at ``bandwidth`` instead of
recomputing it. A restored node's host copy is dropped (moved back).

``NOTE``: ``used`` is the sum of ``num_tokens`` over held nodes; every held
node is hollow (``PrefixCache.check`` asserts both).
"""

from __future__ import annotations

import heapq
import itertools
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from bench.sim.cache import Node


class HostTier:
    """Host copies of hollow nodes, oldest dropped first (see module docs)."""

    def __init__(self, capacity: int, bandwidth_gbs: float) -> None:
        self.capacity = capacity
        self.bandwidth_gbs = bandwidth_gbs
        self.used = 0
        self._stamps = itertools.count()
        self._heap: list[tuple[int, int, "Node"]] = []
        """(stamp, node id, node); entries of nodes no longer held are stale."""
        self.num_stored_tokens = 0
        self.num_restored_tokens = 0

    def fits(self, tokens: int) -> bool:
        """Whether a segment of ``tokens`` can be held at all."""
        return 0 < tokens <= self.capacity

    def add(self, node: "Node") -> list["Node"]:
        """Hold ``node``'s copy; return the nodes dropped to make room."""
        assert not node.on_host and self.fits(node.num_tokens)
        node.on_host = True
        node.host_stamp = next(self._stamps)
        heapq.heappush(self._heap, (node.host_stamp, node.id, node))
        self.used += node.num_tokens
        self.num_stored_tokens += node.num_tokens
        dropped = []
        while self.used > self.capacity:
            stamp, _, old = heapq.heappop(self._heap)
            if old.on_host and old.host_stamp == stamp:
                self.discard(old)
                dropped.append(old)
        return dropped

    def discard(self, node: "Node") -> None:
        """Forget ``node``'s copy (restored, dropped, or its keys removed)."""
        if node.on_host:
            node.on_host = False
            self.used -= node.num_tokens

    def split(self, head: "Node") -> None:
        """``head`` was split off a held node: it is held too, with the same age."""
        heapq.heappush(self._heap, (head.host_stamp, head.id, head))

    def restore_s(self, tokens: int, kv_bytes_per_token: float) -> float:
        """Seconds to copy ``tokens`` of KV back to the device."""
        return tokens * kv_bytes_per_token / (self.bandwidth_gbs * 1e9)

    def held(self, nodes: Iterator["Node"]) -> int:
        """Tokens of ``nodes`` held here (for ``check``)."""
        return sum(n.num_tokens for n in nodes if n.on_host)
