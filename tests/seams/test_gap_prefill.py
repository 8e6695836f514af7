"""Gap recompute's cache side on real SGLang objects (no model): where a gap chunk ends,
and what the chunk's checkpoint hands the request (the cached tail as its prefix)."""

from __future__ import annotations

import itertools
from array import array

import torch

from .sglang_env import cache_params, make_pools, make_req, publish_test_server_args

# isort: split
# (SGLang only after .sglang_env, which installs the sgl_kernel stub)
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
from sglang.srt.mem_cache.radix_cache import RadixKey

from policies.cache.penelope import PenelopePolicy
from server.sglang.cache.gap_cache import GapRadixCache, duplicate_ranges
from server.sglang.cache.gap_prefill import gap_chunk_limit, gap_chunk_of, gap_end
from tests.fakes import EvictBlocksAt

S = list(range(100, 120))   # shared system prompt, 20 tokens
A1, A2, A3 = list(range(200, 230)), list(range(300, 330)), list(range(500, 530))
B1 = list(range(400, 430))
POOL = 256


def setup_module() -> None:
    publish_test_server_args()


def key(ids):
    return RadixKey(array("q", ids))


def gapped_cache():
    """Session a's history S+A1+A2 with A1 evicted (Penelope: private front first)."""
    allocator, req_pool = make_pools(POOL)
    ticks = itertools.count()
    cache = GapRadixCache(cache_params(allocator, req_pool), PenelopePolicy(), clock=lambda: float(next(ticks)))
    for ids, session in ((S + B1, "b"), (S + A1, "a"), (S + A1 + A2, "a")):
        kv = allocator.alloc(len(ids))
        result = cache.insert(InsertParams(key=key(ids), value=kv, session_id=session))
        for s, e in duplicate_ranges(result):
            allocator.free(kv[s:e])
    cache.match_prefix(MatchPrefixParams(key=key(S + B1)))  # b touched last
    assert cache.evict(EvictParams(num_tokens=1)).num_tokens_evicted == len(A1)
    return cache, allocator, req_pool


def admitted(cache, req_pool, ids, prefix_len):
    """A request as SGLang admits it: the tree's prefix locked and in its row."""
    req = make_req("r", ids)
    req.full_untruncated_fill_ids = array("q", ids)
    m = cache.match_prefix(MatchPrefixParams(key=key(ids[:-1])))
    assert m.device_prefix_len == prefix_len
    req.prefix_len = prefix_len
    req.lock, req.last_node = cache.lock(m.last_device_node), m.last_device_node
    req.kv.req_pool_idx = req_pool.alloc_rows(1)[0]
    req.kv.cache_protected_len = prefix_len
    req_pool.write((req.kv.req_pool_idx, slice(0, prefix_len)),
                   cache.path_device_indices(m.last_device_node).to(torch.int32))
    return req


def test_a_request_at_a_gap_gets_a_chunk_ending_at_the_gap_and_then_the_cached_tail():
    cache, allocator, req_pool = gapped_cache()
    tail_slots = cache.match_with_gaps(key(S + A1 + A2)).tail[0][2].clone()
    ids = S + A1 + A2 + A3
    req = admitted(cache, req_pool, ids, prefix_len=len(S))
    assert gap_end(cache, req, len(S)) == len(S) + len(A1)  # the gap A1, cached KV after it
    assert gap_end(cache, req, len(S) + 1) is None  # no gap starts there
    assert gap_chunk_limit(cache, req) == len(A1)
    assert gap_chunk_of(req) == (len(S), len(S) + len(A1))

    # the gap chunk ran: its KV in fresh slots at positions [20, 50); SGLang checkpoints it
    fresh = allocator.alloc(len(A1))
    req_pool.write((req.kv.req_pool_idx, slice(len(S), len(S) + len(A1))), fresh.to(torch.int32))
    req.extend_end = len(S) + len(A1)
    cache.checkpoint(req, up_to=req.extend_end)
    cache.tree.check()

    end = len(S) + len(A1) + len(A2)
    assert req.extend_end == end  # the next chunk starts after the cached tail
    row = req_pool.req_to_token[req.kv.req_pool_idx, :end].to(torch.int64)
    assert torch.equal(row[len(S) + len(A1):], tail_slots)  # the tail's own slots, reused
    assert torch.equal(row[len(S):len(S) + len(A1)], fresh)  # the recomputed gap, adopted by the tree
    assert req.kv.cache_protected_len == end and req.last_node.end == end
    assert cache.match_prefix(MatchPrefixParams(key=key(ids))).device_prefix_len == end  # no gap left
    assert gap_chunk_limit(cache, req) is None  # nothing more to skip: the rest is new tokens
    cache.unlock(req.lock)
    assert allocator.available_size() + cache.total_size() == POOL  # nothing leaked, nothing twice


def test_a_request_with_no_gap_is_left_to_sglang():
    cache, allocator, req_pool = gapped_cache()
    req = admitted(cache, req_pool, S + B1 + [1, 2, 3], prefix_len=len(S) + len(B1))
    assert gap_end(cache, req, req.prefix_len) is None and gap_chunk_limit(cache, req) is None
    assert gap_chunk_of(req) is None


def test_two_gaps_are_recomputed_chunk_by_chunk_and_both_tails_reused():
    """A history S A1 A2 A3 A4 with A1 and A3 freed (two gaps): the request recomputes
    [20, 50), takes A2, recomputes [80, 110) (the continuation's chunk limit), takes
    A4, then only its new tokens remain; the row ends up equal to the tree's path."""
    A4, A5 = list(range(700, 730)), list(range(900, 910))
    allocator, req_pool = make_pools(2 * POOL)
    ticks = itertools.count()
    cache = GapRadixCache(cache_params(allocator, req_pool), EvictBlocksAt(20, 80),
                          clock=lambda: float(next(ticks)))
    history = S + A1 + A2 + A3 + A4
    for end in (len(S), 50, 80, 110, 140):  # one block per turn
        ids = history[:end]
        kv = allocator.alloc(len(ids))
        result = cache.insert(InsertParams(key=key(ids), value=kv, session_id="a"))
        for s, e in duplicate_ranges(result):
            allocator.free(kv[s:e])
    assert cache.evict(EvictParams(num_tokens=len(A1) + len(A3))).num_tokens_evicted == len(A1) + len(A3)
    assert cache.match_with_gaps(key(history)).gaps == [(20, 50), (80, 110)]

    req = admitted(cache, req_pool, history + A5, prefix_len=len(S))
    for gap_start, gap_stop, tail_stop in ((20, 50, 80), (80, 110, 140)):
        assert req.prefix_len == gap_start
        if gap_start == len(S):  # admission: the adder asks where the gap ends
            assert gap_end(cache, req, gap_start) == gap_stop
        else:  # continuation: SGLang's chunk-limit hook
            assert gap_chunk_limit(cache, req) == gap_stop - gap_start
        fresh = allocator.alloc(gap_stop - gap_start)
        req_pool.write((req.kv.req_pool_idx, slice(gap_start, gap_stop)), fresh.to(torch.int32))
        req.extend_end = gap_stop
        cache.checkpoint(req, up_to=gap_stop)
        cache.tree.check()
        assert req.extend_end == tail_stop
        req.prefix_len = req.extend_end  # what SGLang's checkpoint_kv_cache does next
    assert gap_chunk_limit(cache, req) is None and req.prefix_len == len(history)
    row = req_pool.req_to_token[req.kv.req_pool_idx, :len(history)].to(torch.int64)
    assert torch.equal(row, cache.path_device_indices(req.last_node))
    cache.unlock(req.lock)
    assert allocator.available_size() + cache.total_size() == 2 * POOL
