"""A gap-capable radix prefix cache for SGLang, driven by a pure ``EvictionPolicy``.

``GapRadixCache`` is a ``BasePrefixCache`` over the pure gap tree
(``radix.GapTree``), bound here to SGLang: keys are ``RadixKey`` token ids
(``radix.PagedKeys``), values are KV slot-index tensors (``TensorSlots``: a
node's own copy, freed through the allocator), the host tier's payload is the
KV pool's offload API (``host_kv.py``) and times come from ``clock``.
``register_gap_cache(policy)`` registers it with SGLang's own cache registry
(``--radix-cache-backend switchboard_gap``). It is meant for ``+cache=penelope``
(``EvictionNeeds.interior``): eviction may free an interior node's slots and keep its
keys (a *gap*); with a tail-only policy it behaves as SGLang's radix tree.

What SGLang's scheduler sees stays exact without gap recompute:

* ``match_prefix`` returns the contiguous cached prefix up to the first gap
  (the request computes everything after it, the cached tail included);
* ``insert`` through a hollow node fills it from the inserted value.
  ``NOTE`` (ownership): the result's ``adopted_ranges[FULL]`` lists the ranges
  of the value the tree took (filled gaps, new leaf); every other slot of
  ``value[:prefix_len]`` is a duplicate the caller frees (``duplicate_ranges``),
  so a request's tail recomputed after a gap is freed, its gap slots are not;
* ``checkpoint`` does exactly that for a running or finished request.

For gap recompute (``gap_prefill.py``): ``match_with_gaps`` returns the
prefix, the gaps and the cached tail after them; ``gap_at`` says where the gap
a request stands at ends, and ``checkpoint`` hands it the cached tail.

With ``cache.host_tier_tokens`` (a host setting), freed KV is copied to host memory
first (``host_kv.HostKVTier``) and ``restore_host_segments`` brings the copies
back at admission instead of recomputing them.

The eviction order (ties: the older node first), the host tier's drop order
and pruning are the tree's own, shared with the simulator's cache
(``bench/sim/cache.py``); the one choice this binding makes differently is
``touch_remainder=False`` (``radix.tree.GapTree``).

NOTE (size): ~310 lines, one ``BasePrefixCache`` implementation: SGLang's
cache contract is one class, and its helpers are already out (``gap_paths``,
``host_kv``, the tree in ``radix/``).
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable
from typing import Any

import torch
from sglang.srt.mem_cache import base_prefix_cache as bpc
from sglang.srt.mem_cache import radix_cache

from policies.cache import EvictionPolicy
from radix import GapTree, HostTier, PagedKeys, first_gap, merge_ranges
from server.sglang.cache.gap_paths import (
    FULL,
    GapMatch,
    GapNode,
    TensorSlots,
    cat_slots,
    duplicate_ranges,
    gaps_of,
)
from server.sglang.cache.host_kv import HostKVTier, restore_host_run
from server.sglang.cache.names import GAP_CACHE_BACKEND, register_backend
from server.sglang.cache.symbols import GAP_CACHE_SYMBOLS
from server.sglang.launch import contract


class GapRadixCache(bpc.BasePrefixCache):
    """SGLang prefix cache whose nodes can be hollow (see module docs)."""

    def __init__(self, params: Any, policy: EvictionPolicy,
                 clock: Callable[[], float] = time.monotonic, host_tier_tokens: int = 0) -> None:
        if params.disable:
            raise ValueError("the gap cache cannot run with the radix cache disabled")
        self.disable = False
        self.req_to_token_pool = params.req_to_token_pool
        self.token_to_kv_pool_allocator = params.token_to_kv_pool_allocator
        self.page_size = params.page_size
        self.is_eagle = params.is_eagle
        self.policy, self.clock = policy, clock
        self.host_tier_tokens = host_tier_tokens
        """Size of the host tier (``cache.host_tier_tokens``); 0 = none."""
        dev = getattr(self.token_to_kv_pool_allocator, "device", "cpu")
        self.device = torch.device(dev if isinstance(dev, (str, torch.device)) else "cpu")
        self.reset()

    def reset(self) -> None:
        self._empty = torch.empty((0,), dtype=torch.int64, device=self.device)
        root_key = radix_cache.RadixKey(token_ids=array("q"))
        self.host = self._host_tier()
        """The host tier's payload (the tree's ``tree.host`` keeps its accounting)."""
        tier = HostTier(self.host_tier_tokens, copies=self.host) if self.host is not None else None
        # NOTE: touch_remainder=False: a match that splits a node leaves the
        # split-off remainder's recency alone (see GapTree.touch_remainder)
        self.tree: GapTree[Any, torch.Tensor] = GapTree(
            self.policy, PagedKeys(self.page_size), root_key,
            slots=TensorSlots(self.token_to_kv_pool_allocator), host=tier, touch_remainder=False)
        self.root_node = self.tree.root

    def _host_tier(self) -> HostKVTier | None:
        if self.host_tier_tokens <= 0:
            return None
        kvcache = self.token_to_kv_pool_allocator.get_kvcache()
        if kvcache is None:
            raise ValueError("cache.host_tier_tokens needs the allocator's KV pool")
        return HostKVTier(kvcache)

    def _walk(self, key: Any) -> list[GapNode]:
        """The tree path ``key`` runs through (hollow nodes included), split
        where the match ends and accessed now."""
        _, node = self.tree.match(self._key(key), self.clock())
        return self.tree.path_to(node)

    def _key(self, key: Any) -> Any:
        key, _ = key.maybe_to_bigram_view(self.is_eagle)
        return key.page_aligned(self.page_size)

    # ----------------------------------------------------------------- match
    def match_prefix(self, params: bpc.MatchPrefixParams) -> bpc.MatchResult:
        path = self._walk(params.key)
        gap = first_gap(path)
        last = path[gap - 1] if gap else self.root_node
        return bpc.MatchResult(device_prefix_len=last.end if last is not self.root_node else 0,
                               last_device_node=last, last_host_node=last, best_match_node=last)

    def touch_prefix(self, key: Any) -> None:
        self._walk(key)

    def match_with_gaps(self, key: Any) -> GapMatch:
        """The cached prefix, the gaps and the cached tail of ``key`` (module docs)."""
        return gaps_of(self._walk(key), self.root_node, self._empty)

    def fill_gap(self, node: GapNode, start: int, end: int,
                 indices: torch.Tensor) -> list[tuple[int, int]]:
        """Give the gap ``[start, end)`` on the path to ``node`` (a locked
        ``GapMatch.last_node``) the newly computed slots ``indices``. Returns
        the ranges the tree took; the rest (a part another request's insert
        filled meanwhile) stays the caller's to free."""
        return merge_ranges((n.start, n.end) for n in self.tree.fill(node, indices, start, end))

    def req_key(self, req: Any, length: int) -> Any:
        """The tree key of ``req``'s first ``length`` tokens."""
        return radix_cache.RadixKey(req.full_untruncated_fill_ids[:length], req.extra_key,
                                    is_bigram=self.is_eagle, cache_salt=req.cache_salt)

    def req_path(self, req: Any) -> list[GapNode]:
        """The tree path of ``req``'s prompt but its last token (hollow nodes
        included). NOTE: the last prompt token is never counted as cached
        (SGLang computes it for the first output's logits)."""
        return self._walk(self.req_key(req, len(req.full_untruncated_fill_ids) - 1))

    def gap_at(self, req: Any, start: int) -> int | None:
        """End of the gap that starts at token ``start`` of ``req``'s path, if
        cached KV follows it (so prefilling only the gap pays off); else ``None``."""
        gm = gaps_of(self.req_path(req), self.root_node, self._empty)
        if not gm.gaps or gm.gaps[0][0] != start:
            return None
        end = gm.gaps[0][1]
        return end if any(seg_start == end for seg_start, _, _ in gm.tail) else None

    def _adopt_cached_continuation(self, req: Any, up_to: int) -> None:
        """After a chunk of ``req`` (``up_to`` < its length): take the tree's
        contiguous cached continuation as the request's prefix, so the next chunk
        starts after it. This is how a cached tail after a recomputed gap is
        reused. NOTE: exact for any cached continuation: a prefix cache's KV of a
        token depends only on the tokens up to it, and the tail's were computed
        after identical tokens at identical positions."""
        path = self.req_path(req)
        gap = first_gap(path)
        last = path[gap - 1] if gap else None
        if last is None or last.end <= up_to:
            return
        indices = self.path_device_indices(last)
        self.req_to_token_pool.write((req.kv.req_pool_idx, slice(up_to, last.end)), indices[up_to:last.end])
        self.unlock(req.lock)
        req.lock = self.lock(last)
        req.last_node = last
        req.kv.cache_protected_len = last.end
        req.kv.cache_inserted_len = max(req.kv.cache_inserted_len, last.end)
        req.extend_end = last.end  # NOTE: checkpoint_kv_cache makes it the prefix

    def path_device_indices(self, node: GapNode) -> torch.Tensor:
        path = self.tree.path_to(node)
        assert not any(n.hollow for n in path), "the path to this node has a gap"
        return cat_slots([n.value for n in path], self._empty)

    # ---------------------------------------------------------------- insert
    def insert(self, params: bpc.InsertParams) -> bpc.InsertResult:
        key = self._key(params.key)
        assert params.value is not None, "the gap cache needs the inserted KV slots"
        done = self.tree.insert(key, self.clock(), value=params.value[:len(key)],
                                inserted=params.inserted_len, priority=params.priority or 0,
                                session=params.session_id)
        return bpc.InsertResult(prefix_len=done.prefix_len, total_len=len(key),
                                last_device_node=done.node, adopted_ranges={FULL: done.adopted})

    def checkpoint(self, req: Any, *, up_to: int, **kwargs: Any) -> None:
        token_ids = req.full_untruncated_fill_ids[:up_to]
        row = self.req_to_token_pool.req_to_token[req.kv.req_pool_idx, :len(token_ids)]
        key = self._key(radix_cache.RadixKey(token_ids, req.extra_key, is_bigram=self.is_eagle,
                                             cache_salt=req.cache_salt))
        values = row[:len(key)].to(dtype=torch.int64, copy=True)
        result = self.insert(bpc.InsertParams(
            key=key, value=values, inserted_len=req.kv.cache_inserted_len,
            priority=req.priority or 0, session_id=getattr(req, "session_id", None)))
        req.kv.cache_inserted_len = max(req.kv.cache_inserted_len, len(key))
        protected = req.kv.cache_protected_len
        for s, e in duplicate_ranges(result, protected):
            self.token_to_kv_pool_allocator.free_segment(values[s:e], start_pos=s)
        new_indices = self.path_device_indices(result.last_device_node)
        assert len(new_indices) == len(key), (len(new_indices), len(key))
        self.req_to_token_pool.write((req.kv.req_pool_idx, slice(protected, len(new_indices))),
                                     new_indices[protected:])
        self.unlock(req.lock)
        req.lock = self.lock(result.last_device_node)
        req.kv.cache_protected_len = len(new_indices)
        req.last_node = result.last_device_node
        if not req.finished() and up_to < len(req.full_untruncated_fill_ids):
            self._adopt_cached_continuation(req, up_to)

    # ------------------------------------------------------ eviction, locks
    def evict(self, params: bpc.EvictParams) -> bpc.EvictResult:
        start = time.perf_counter()
        freed = self.tree.evict(params.num_tokens)
        self.update_eviction_metrics(freed, start)
        return bpc.EvictResult(num_tokens_evicted=freed)

    def inc_lock_ref(self, node: GapNode) -> bpc.IncLockRefResult:
        return bpc.IncLockRefResult(delta=self.tree.lock(node))

    def dec_lock_ref(self, node: GapNode, params: Any | None = None) -> bpc.DecLockRefResult:
        return bpc.DecLockRefResult(delta=self.tree.unlock(node))

    def evictable_size(self) -> int:
        return self.tree.evictable_tokens

    def full_evictable_size(self) -> int:
        return self.tree.evictable_tokens

    def protected_size(self) -> int:
        return self.tree.protected_tokens

    def full_protected_size(self) -> int:
        return self.tree.protected_tokens

    def total_size(self) -> int:
        return self.tree.tree_tokens

    def restore_host_segments(self, req: Any) -> int:
        """Restore the host-held hollow nodes right after ``req``'s cached prefix
        (``host_kv.restore_host_run``); returns the tokens restored (0: none, or
        no room). Called at admission, before SGLang matches the request
        (``gap_prefill.GapPrefillAdder.add_one_req``)."""
        return 0 if self.host is None else restore_host_run(self, req)

    def owned_slots(self) -> list[torch.Tensor]:
        """Every node's slots (tests check that no slot is owned twice)."""
        return [n.value for n in self.tree.nodes() if not n.hollow]


_active: dict[str, Any] = {}


def register_gap_cache(policy: EvictionPolicy, host_tier_tokens: int = 0) -> str:
    """Make ``--radix-cache-backend switchboard_gap`` build a ``GapRadixCache``
    over ``policy`` with a host tier of ``host_tier_tokens`` (re-entrant: a
    later call replaces both). Returns the backend name. The plugin calls it in
    every SGLang process when the cache policy evicts interior nodes
    (``+cache=penelope``)."""
    contract.verify(GAP_CACHE_SYMBOLS)
    _active["policy"] = policy
    _active["host_tier_tokens"] = host_tier_tokens
    return register_backend(GAP_CACHE_BACKEND, _build)


def _build(ctx: Any) -> GapRadixCache:
    unsupported = [name for name in ("is_hybrid_swa", "is_hybrid_ssm", "enable_hierarchical_cache",
                                     "disable_radix_cache") if getattr(ctx, name, False)]
    if unsupported:
        raise ValueError(f"the {GAP_CACHE_BACKEND} cache does not support {', '.join(unsupported)}")
    return GapRadixCache(ctx.params, _active["policy"], host_tier_tokens=_active["host_tier_tokens"])
