"""Two levels below the device, host memory and SSD, each block placed by a tier policy.

A ``HostTier`` with two levels instead of one (``policies/tier``): when the
tree frees a node's KV and the node can be held, the host's *placer* answers
the node's home (``Home``) and the node is held there:

* ``MEMORY``: in memory; dropped from memory (oldest first, for room) it is
  gone, or, with ``demote``, moved to SSD;
* ``SSD``: on SSD; dropped from SSD it is gone;
* ``BOTH``: in memory and on SSD (an inclusive hierarchy): it stays held
  while either level keeps it;
* ``NONE``: not held (``add`` returns it among the dropped: the tree prunes it
  when nothing else keeps it).

Each level drops its oldest copies first (ties: smaller node id first), like
``HostTier``; a split node's parts keep its levels and age. Restoring or
refilling a node drops its copies from both levels (``discard``).

``NOTE`` (invariants, on top of the ``HostTier`` ones ``GapTree.check`` asserts)::

    memory.used <= memory.capacity        ssd.used <= ssd.capacity
    held n  <=>  n in memory or n on SSD  (levels(n) non-empty)
    n in both levels  =>  home(n) is BOTH (memory and SSD are disjoint otherwise)
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from typing import Any

from policies.tier import Home
from radix.host import HostTier
from radix.node import Node

_Node = Node[Any, Any]
#: The host's answer for a node being held: its home (it may read the tier's free space).
Placer = Callable[[_Node, "TieredHost"], Home]


class Level:
    """One level's copies, oldest dropped first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self.stamps: dict[_Node, int] = {}
        self._heap: list[tuple[int, int, _Node]] = []

    def free(self) -> int:
        return self.capacity - self.used

    def put(self, node: _Node, stamp: int) -> list[_Node]:
        """Hold ``node`` (age ``stamp``); return the nodes this level dropped for room."""
        self.stamps[node] = stamp
        heapq.heappush(self._heap, (stamp, node.id, node))
        self.used += node.num_tokens
        dropped = []
        while self.used > self.capacity:
            old_stamp, _, old = heapq.heappop(self._heap)
            if self.stamps.get(old) == old_stamp:
                self.take(old)
                dropped.append(old)
        return dropped

    def take(self, node: _Node) -> bool:
        """Forget ``node`` if held here; whether it was."""
        if self.stamps.pop(node, None) is None:
            return False
        self.used -= node.num_tokens
        if len(self._heap) > 4 * len(self.stamps) + 64:  # NOTE: drop dead heap entries
            self._heap = [e for e in self._heap if self.stamps.get(e[2]) == e[0]]
            heapq.heapify(self._heap)
        return True

    def split(self, head: _Node, tail: _Node) -> None:
        """``head`` was split off held ``tail``: held here too, same age (tokens unchanged in total)."""
        stamp = self.stamps[tail]
        self.stamps[head] = stamp
        heapq.heappush(self._heap, (stamp, head.id, head))


class TieredHost(HostTier):
    """Host memory and SSD below the device, placed per node (see module docs)."""

    def __init__(self, memory_tokens: int, ssd_tokens: int, placer: Placer, demote: bool = False) -> None:
        super().__init__(memory_tokens + ssd_tokens)
        self.memory = Level(memory_tokens)
        self.ssd = Level(ssd_tokens)
        self.placer = placer
        self.demote = demote
        self.homes: dict[_Node, Home] = {}
        self.on_ssd: Callable[[_Node], None] | None = None
        """Told of each node put on the SSD level (placed there, or demoted): the host writes it."""
        self._ages = itertools.count()

    def fits(self, tokens: int) -> bool:
        return 0 < tokens <= max(self.memory.capacity, self.ssd.capacity)

    def level_of(self, node: _Node) -> Home:
        """Where ``node``'s copy is now (``BOTH``: either serves; ``NONE``: not held)."""
        mem, ssd = node in self.memory.stamps, node in self.ssd.stamps
        return Home.BOTH if mem and ssd else Home.MEMORY if mem else Home.SSD if ssd else Home.NONE

    def add(self, node: _Node, copy: object) -> list[_Node]:
        assert not node.on_host and self.fits(node.num_tokens)
        home = self.placer(node, self)
        wants = {Home.MEMORY: (self.memory,), Home.SSD: (self.ssd,), Home.BOTH: (self.memory, self.ssd),
                 Home.NONE: ()}[home]
        levels = [lv for lv in wants if node.num_tokens <= lv.capacity]
        if not levels:
            return [node]
        node.on_host, node.host_copy = True, copy
        self.homes[node] = home
        self.used += node.num_tokens
        self.num_copies += 1
        self.num_stored_tokens += node.num_tokens
        stamp = next(self._ages)
        dropped: list[_Node] = []
        for level in levels:
            if level is self.ssd and self.on_ssd is not None:
                self.on_ssd(node)
            for old in level.put(node, stamp):
                if level is self.memory and self.demote and self.homes.get(old) is Home.MEMORY \
                        and old.num_tokens <= self.ssd.capacity and old not in self.ssd.stamps:
                    self.homes[old] = Home.SSD
                    if self.on_ssd is not None:
                        self.on_ssd(old)
                    dropped += self.ssd.put(old, next(self._ages))  # NOTE: the newest on SSD
                else:
                    dropped.append(old)
        gone = [n for n in dict.fromkeys(dropped) if self.level_of(n) is Home.NONE and n.on_host]
        for n in gone:
            self._release(n)
        return gone

    def discard(self, node: _Node) -> None:
        if not node.on_host:
            return
        self.memory.take(node)
        self.ssd.take(node)
        self._release(node)

    def split(self, head: _Node, tail: _Node, k: int) -> None:
        for level in (self.memory, self.ssd):
            if tail in level.stamps:
                level.split(head, tail)
        self.homes[head] = self.homes[tail]
        self.num_copies += 1

    def held(self, nodes: Iterable[_Node]) -> int:
        return sum(n.num_tokens for n in nodes if n.on_host)

    def _release(self, node: _Node) -> None:
        node.on_host = False
        node.host_copy = None
        self.homes.pop(node, None)
        self.used -= node.num_tokens
        self.num_copies -= 1
