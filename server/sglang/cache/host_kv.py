"""A host-memory second tier for the gap cache (``cache.host_tier_tokens``).

When the gap tree frees a node's KV (``gap_tree.GapTree.evict``), the tier
copies the node's K and V rows out of SGLang's device KV pool first, with the
pool's own offload API (``get_cpu_copy``; ``load_cpu_copy`` brings them back),
and the node stays hollow holding the copy. A request whose path runs through
such a node gets it *restored* at admission (``GapRadixCache.restore_host_segments``)
instead of recomputing it: new slots, the copied rows written back, the node
filled (``HostRestoreMixin``, part of the gap cache). A copy is exact: the rows
are the same bytes the forward once wrote.

``NOTE`` (accounting): ``used`` is the sum of ``tokens`` over live copies and
never exceeds ``capacity``; to make room the oldest copy is dropped first and
the tree told (``on_drop``), which prunes a node left useless. Every live copy
belongs to exactly one hollow node (``GapTree.check`` asserts the node side).
"""

from __future__ import annotations

import heapq
import itertools
import logging
from typing import Any, Callable, Optional

import torch
from sglang.srt.mem_cache import base_prefix_cache as bpc

from server.sglang.cache.gap_node import GapNode, first_gap
from server.sglang.cache.metrics import prometheus_counter

log = logging.getLogger("switchboard.host_kv")


class HostCopy:
    """One node's KV rows in host memory: per layer, ``[tokens, heads, dim]``."""

    __slots__ = ("node", "k", "v", "tokens", "stamp", "live")

    def __init__(self, node: Any, k: list[torch.Tensor], v: list[torch.Tensor], stamp: int) -> None:
        self.node, self.k, self.v, self.stamp = node, k, v, stamp
        self.tokens = int(k[0].shape[0]) if k else 0
        self.live = True


class HostKVTier:
    """Host copies of freed KV, oldest dropped first (see module docs)."""

    def __init__(self, kvcache: Any, capacity: int, on_drop: Callable[[Any], None]) -> None:
        # NOTE: the pool's own offload API (contract: gap_cache.GAP_CACHE_SYMBOLS)
        for method in ("get_cpu_copy", "load_cpu_copy"):
            if not callable(getattr(kvcache, method, None)):
                raise ValueError(f"cache.host_tier_tokens: SGLang's KV pool "
                                 f"{type(kvcache).__name__} has no {method}")
        if not isinstance(getattr(kvcache, "cpu_offloading_chunk_size", None), int):
            raise ValueError(f"cache.host_tier_tokens: SGLang's KV pool {type(kvcache).__name__} "
                             "has no cpu_offloading_chunk_size")
        self.kvcache, self.capacity, self.on_drop = kvcache, capacity, on_drop
        self.used = 0
        self.copies = 0
        """Live copies (the heap also holds dead entries until compacted)."""
        self.stored_tokens = 0
        self.restored_tokens = 0
        self._stamps = itertools.count()
        self._seq = itertools.count()
        self._heap: list[tuple[int, int, HostCopy]] = []
        # NOTE: one metric per process: a cache reset builds a new tier, not a new metric
        self._prom = prometheus_counter("switchboard_host_restored_tokens",
                                        "Tokens restored from the host tier instead of recomputed (Penelope)")

    # ------------------------------------------------------------ HostCopies
    def offload(self, node: Any) -> Optional[HostCopy]:
        tokens = len(node.key)
        if tokens == 0 or tokens > self.capacity:
            return None
        while self.used + tokens > self.capacity:
            self._drop_oldest()
        chunks = self.kvcache.get_cpu_copy(node.value)
        k = [torch.cat([c[0] for c in layer]) for layer in chunks]
        v = [torch.cat([c[1] for c in layer]) for layer in chunks]
        copy = HostCopy(node, k, v, next(self._stamps))
        self._push(copy)
        self.used += tokens
        self.stored_tokens += tokens
        return copy

    def split(self, copy: HostCopy, k: int, head: Any, tail: Any) -> tuple[HostCopy, HostCopy]:
        assert copy.live and 0 < k < copy.tokens
        copy.live = False
        self.copies -= 1
        a = HostCopy(head, [t[:k] for t in copy.k], [t[:k] for t in copy.v], copy.stamp)
        b = HostCopy(tail, [t[k:] for t in copy.k], [t[k:] for t in copy.v], copy.stamp)
        self._push(a)
        self._push(b)
        return a, b

    def drop(self, copy: HostCopy) -> None:
        if copy.live:
            copy.live = False
            self.used -= copy.tokens
            self.copies -= 1

    # --------------------------------------------------------------- restore
    def restore(self, copy: HostCopy, slots: torch.Tensor) -> None:
        """Write ``copy``'s rows into the device pool at ``slots`` (the caller
        then fills the node, which drops the copy)."""
        assert copy.live and len(slots) == copy.tokens
        size = self.kvcache.cpu_offloading_chunk_size
        chunks = [[[k[i:i + size], v[i:i + size]] for i in range(0, copy.tokens, size)]
                  for k, v in zip(copy.k, copy.v)]
        self.kvcache.load_cpu_copy(chunks, slots)
        self.restored_tokens += copy.tokens
        if self._prom is not None:
            self._prom.inc(copy.tokens)

    # -------------------------------------------------------------- internal
    def _push(self, copy: HostCopy) -> None:
        heapq.heappush(self._heap, (copy.stamp, next(self._seq), copy))
        self.copies += 1
        if len(self._heap) > 4 * self.copies + 64:  # NOTE: drop dead entries now and then
            self._heap = [e for e in self._heap if e[2].live]
            heapq.heapify(self._heap)

    def _drop_oldest(self) -> None:
        while self._heap:
            _, _, copy = heapq.heappop(self._heap)
            if copy.live:
                self.drop(copy)
                self.on_drop(copy.node)
                return
        raise AssertionError("host tier over capacity with no live copy")


class HostRestoreMixin:
    """The gap cache's side of the tier (``GapRadixCache`` inherits it): build
    the tier of ``host_tier_tokens`` (``cache.host_tier_tokens``) and restore
    copies at admission."""

    host_tier_tokens: int
    token_to_kv_pool_allocator: Any
    tree: Any
    host: Optional[HostKVTier]
    evict: Callable[[Any], Any]
    req_path: Callable[[Any], list[GapNode]]

    def _host_tier(self) -> Optional[HostKVTier]:
        tokens = self.host_tier_tokens
        if tokens <= 0:
            return None
        kvcache = self.token_to_kv_pool_allocator.get_kvcache()
        if kvcache is None:
            raise ValueError("cache.host_tier_tokens needs the allocator's KV pool")
        return HostKVTier(kvcache, tokens, on_drop=lambda node: self.tree.host_dropped(node))

    def restore_host_segments(self, req: Any) -> int:
        """Restore the host-held hollow nodes right after ``req``'s cached
        prefix (a gap the host tier has a copy of): new slots, the copied rows
        written back, the nodes filled. Returns the tokens restored (0: none,
        or no room even after evicting). Called at admission, before SGLang
        matches the request (``gap_prefill.GapPrefillAdder.add_one_req``)."""
        if self.host is None:
            return 0
        run = self._host_run(self.req_path(req))
        if not run:
            return 0
        last = run[-1]
        self.tree.lock(last)  # NOTE: the prefix and the run stay put while we make room
        try:
            allocator = self.token_to_kv_pool_allocator
            need = sum(len(n.key) for n in run)
            if allocator.available_size() < need:
                self.evict(bpc.EvictParams(num_tokens=need - allocator.available_size()))
                # NOTE: evicting may have offloaded others and dropped run copies
                run = self._host_run(self.tree.path_to(last))
                need = sum(len(n.key) for n in run)
            slots = allocator.alloc(need) if run else None
            if slots is None:
                return 0
            offset = 0
            for n in run:
                self.host.restore(n.host, slots[offset:offset + len(n.key)])
                offset += len(n.key)
            taken = self.tree.fill(run[-1], run[0].start, run[-1].end, slots)
            assert taken == [(run[0].start, run[-1].end)], taken
        finally:
            self.tree.unlock(last)
        log.info("host restore rid=%s positions=[%d, %d) restored_tokens=%d total=%d",
                 req.rid, run[0].start, run[-1].end, need, self.host.restored_tokens)
        return need

    @staticmethod
    def _host_run(path: list[GapNode]) -> list[GapNode]:
        """The hollow nodes with host copies that start at the path's first gap."""
        run = []
        for n in path[first_gap(path):]:
            if not n.hollow or n.host is None:
                break
            run.append(n)
        return run
