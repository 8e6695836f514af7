"""A host-memory second tier for the gap cache (``cache.host_tier_tokens``).

When the gap tree frees a node's KV (``gap_tree.GapTree.evict``), the tier
copies the node's K and V rows out of SGLang's device KV pool first, with the
pool's own offload API (``get_cpu_copy``; ``load_cpu_copy`` brings them back),
and the node stays hollow holding the copy. A request whose path runs through
such a node gets it *restored* at admission (``GapRadixCache.restore_host_segments``)
instead of recomputing it: new slots, the copied rows written back, the node
filled. A copy is exact: the rows are the same bytes the forward once wrote.

``NOTE`` (accounting): ``used`` is the sum of ``tokens`` over live copies and
never exceeds ``capacity``; to make room the oldest copy is dropped first and
the tree told (``on_drop``), which prunes a node left useless. Every live copy
belongs to exactly one hollow node (``GapTree.check`` asserts the node side).
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
from typing import Any, Callable, Optional

import torch

log = logging.getLogger("switchboard.host_kv")


@functools.lru_cache(maxsize=None)
def _restored_counter() -> Optional[Any]:
    """The process's Prometheus counter of restored tokens (one per process:
    a cache reset builds a new tier, not a new metric)."""
    try:
        from prometheus_client import Counter

        return Counter("switchboard_host_restored_tokens",
                       "Tokens restored from the host tier instead of recomputed (Penelope)")
    except Exception:  # NOTE: no prometheus_client
        return None


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
        for method in ("get_cpu_copy", "load_cpu_copy"):
            if not callable(getattr(kvcache, method, None)):
                raise ValueError(f"cache.host_tier_tokens: SGLang's KV pool "
                                 f"{type(kvcache).__name__} has no {method}")
        self.kvcache, self.capacity, self.on_drop = kvcache, capacity, on_drop
        self.used = 0
        self.copies = 0
        """Live copies (the heap also holds dead entries until compacted)."""
        self.stored_tokens = 0
        self.restored_tokens = 0
        self._stamps = itertools.count()
        self._seq = itertools.count()
        self._heap: list[tuple[int, int, HostCopy]] = []
        self._prom = _restored_counter()

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
