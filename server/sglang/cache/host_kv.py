"""The gap cache's host tier, bound to SGLang's KV pool (``cache.host_tier_tokens``).

The gap tree keeps the tier's accounting (``radix.host.HostTier``: which
hollow nodes are held, capacity, oldest dropped first); this module holds the
payload (``HostKVTier``, the tree's ``HostCopies``). When the tree frees a
node's KV it first copies the node's K and V rows out of SGLang's device KV
pool with the pool's own offload API (``get_cpu_copy``; ``load_cpu_copy``
brings them back), and the node stays hollow holding the copy. A request
whose path runs through such nodes gets them *restored* at admission
(``restore_host_run``, called by ``GapRadixCache.restore_host_segments``)
instead of recomputing them: new slots, the copied rows written back, the
nodes filled. A copy is exact: the rows are the same bytes the forward once
wrote.

``NOTE`` (ownership): every live copy belongs to exactly one held node
(``node.host_copy``; ``GapTree.check`` asserts it); filling or dropping the
node's copy drops it here.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import torch
from sglang.srt.mem_cache import base_prefix_cache as bpc

from radix import GapTree, Node, first_gap
from server.sglang.cache.metrics import prometheus_counter


class RestoringCache(Protocol):
    """What ``restore_host_run`` uses of the gap cache (``GapRadixCache``).

    NOTE: a Protocol, not the class: gap_cache.py imports this module, and
    nothing here imports it back (tests/config/test_boundaries.py)."""

    tree: GapTree[Any, Any]
    """The gap tree."""
    host: HostKVTier | None
    """The host tier's copies (``None``: no tier)."""
    token_to_kv_pool_allocator: Any
    """SGLang's KV slot allocator."""

    def req_path(self, req: Any) -> list[Node[Any, Any]]:
        """Nodes of ``req``'s cached prefix, from the root."""
        ...

    def evict(self, params: bpc.EvictParams) -> bpc.EvictResult:
        """SGLang's eviction entry point."""
        ...

log = logging.getLogger("switchboard.host_kv")


class HostCopy:
    """One node's KV rows in host memory: per layer, ``[tokens, heads, dim]``."""

    __slots__ = ("k", "v", "tokens", "live")

    def __init__(self, k: list[torch.Tensor], v: list[torch.Tensor]) -> None:
        self.k, self.v = k, v
        self.tokens = int(k[0].shape[0]) if k else 0
        self.live = True


class HostKVTier:
    """Host copies of freed KV rows (the tree's ``radix.HostCopies``; see module docs)."""

    def __init__(self, kvcache: Any) -> None:
        # NOTE: the pool's own offload API (contract: gap_cache.GAP_CACHE_SYMBOLS)
        for method in ("get_cpu_copy", "load_cpu_copy"):
            if not callable(getattr(kvcache, method, None)):
                raise ValueError(f"cache.host_tier_tokens: SGLang's KV pool "
                                 f"{type(kvcache).__name__} has no {method}")
        if not isinstance(getattr(kvcache, "cpu_offloading_chunk_size", None), int):
            raise ValueError(f"cache.host_tier_tokens: SGLang's KV pool {type(kvcache).__name__} "
                             "has no cpu_offloading_chunk_size")
        self.kvcache = kvcache
        self.num_live = 0
        """Live copies (one per held node)."""
        # NOTE: one metric per process: a cache reset builds a new tier, not a new metric
        self._prom = prometheus_counter("switchboard_host_restored_tokens",
                                        "Tokens restored from the host tier instead of recomputed (Penelope)")

    # ------------------------------------------------------------ HostCopies
    def offload(self, node: Node[Any, torch.Tensor]) -> HostCopy:
        chunks = self.kvcache.get_cpu_copy(node.value)
        k = [torch.cat([c[0] for c in layer]) for layer in chunks]
        v = [torch.cat([c[1] for c in layer]) for layer in chunks]
        self.num_live += 1
        return HostCopy(k, v)

    def split(self, copy: object, k: int, head: Node[Any, Any], tail: Node[Any, Any]) -> tuple[HostCopy, HostCopy]:
        assert isinstance(copy, HostCopy) and copy.live and 0 < k < copy.tokens
        copy.live = False
        self.num_live += 1
        return (HostCopy([t[:k] for t in copy.k], [t[:k] for t in copy.v]),
                HostCopy([t[k:] for t in copy.k], [t[k:] for t in copy.v]))

    def drop(self, copy: object) -> None:
        assert isinstance(copy, HostCopy)
        if copy.live:
            copy.live = False
            copy.k, copy.v = [], []  # NOTE: the host memory goes now, not with the node
            self.num_live -= 1

    # --------------------------------------------------------------- restore
    def restore(self, copy: HostCopy, slots: torch.Tensor) -> None:
        """Write ``copy``'s rows into the device pool at ``slots`` (the caller
        then fills the node, which drops the copy)."""
        assert copy.live and len(slots) == copy.tokens
        size = self.kvcache.cpu_offloading_chunk_size
        chunks = [[[k[i:i + size], v[i:i + size]] for i in range(0, copy.tokens, size)]
                  for k, v in zip(copy.k, copy.v)]
        self.kvcache.load_cpu_copy(chunks, slots)
        self._prom.inc(copy.tokens)


def host_run(path: list[Node[Any, torch.Tensor]]) -> list[Node[Any, torch.Tensor]]:
    """The held hollow nodes that start at the path's first gap."""
    run = []
    for n in path[first_gap(path):]:
        if not n.on_host:
            break
        run.append(n)
    return run


def restore_host_run(cache: RestoringCache, req: Any) -> int:
    """Restore the held nodes right after ``req``'s cached prefix (a gap the
    host tier has a copy of): new slots, the copied rows written back, the
    nodes filled. Returns the tokens restored (0: none, or no room even after
    evicting)."""
    tree, tier = cache.tree, cache.host
    assert tier is not None and tree.host is not None
    run = host_run(cache.req_path(req))
    if not run:
        return 0
    last = run[-1]
    tree.lock(last)  # NOTE: the prefix and the run stay put while we make room
    try:
        allocator = cache.token_to_kv_pool_allocator
        need = sum(n.num_tokens for n in run)
        if allocator.available_size() < need:
            cache.evict(bpc.EvictParams(num_tokens=need - allocator.available_size()))
            # NOTE: evicting may have offloaded others and dropped run copies
            run = host_run(tree.path_to(last))
            need = sum(n.num_tokens for n in run)
        slots = allocator.alloc(need) if run else None
        if slots is None:
            return 0
        offset = 0
        for n in run:
            assert isinstance(n.host_copy, HostCopy)
            tier.restore(n.host_copy, slots[offset:offset + n.num_tokens])
            offset += n.num_tokens
        filled = tree.fill(run[-1], slots, run[0].start, run[-1].end, restore=True)
        assert filled == run, (filled, run)
    finally:
        tree.unlock(last)
    log.info("host restore rid=%s positions=[%d, %d) restored_tokens=%d total=%d",
             req.rid, run[0].start, run[-1].end, need, tree.host.num_restored_tokens)
    return need
