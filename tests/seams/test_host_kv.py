"""The gap cache's host tier (server/sglang/cache/host_kv.py) on a real SGLang KV pool
on CPU: freed KV is copied out with the pool's own offload API and restored
into new slots byte for byte; the tier never exceeds its capacity, drops the
oldest copy first and the tree prunes what that leaves useless."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .sglang_env import cache_params, make_pools, make_req
from .test_gap_cache import POOL, Harness, key, op, sessions

# isort: split
# (SGLang only after .sglang_env, which installs the sgl_kernel stub)
from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool

from policies.cache.penelope import PenelopePolicy
from server.sglang.cache.gap_cache import GapRadixCache, duplicate_ranges

LAYERS = 2


def rows(ids, start):
    """The KV rows a forward would write for ``ids`` at positions ``start``...:
    K = (token, position), V = (position, -token), one head."""
    pos = torch.arange(start, start + len(ids), dtype=torch.float32)
    tok = torch.tensor(list(ids), dtype=torch.float32)
    return torch.stack([tok, pos], 1)[:, None, :], torch.stack([pos, -tok], 1)[:, None, :]


def make_host_cache(policy, num_tokens, host_tokens):
    pool = MHATokenToKVPool(num_tokens, 1, torch.float32, 1, 2, LAYERS, "cpu", False)
    allocator = TokenToKVPoolAllocator(num_tokens, torch.float32, "cpu", pool, False)
    ticks = itertools.count()
    cache = GapRadixCache(cache_params(allocator, ReqToTokenPool(16, 512, "cpu", False)),
                          PenelopePolicy(**policy), clock=lambda: float(next(ticks)),
                          host_tier_tokens=host_tokens)
    return cache, allocator, pool


def compute(pool, slots, ids, start):
    """What the forward does: write the rows of ``ids`` into ``slots``."""
    k, v = rows(ids, start)
    for layer in range(LAYERS):
        pool.k_buffer[layer][slots] = k
        pool.v_buffer[layer][slots] = v


def assert_tree_rows_exact(cache, pool):
    """Every cached token's slots hold exactly the rows its token and position got."""
    for n in cache.tree.nodes():
        if n.hollow:
            continue
        k, v = rows(n.key.token_ids, n.start)
        for layer in range(LAYERS):
            assert torch.equal(pool.k_buffer[layer][n.value], k), "wrong K rows in the tree"
            assert torch.equal(pool.v_buffer[layer][n.value], v), "wrong V rows in the tree"


def insert(cache, allocator, pool, ids, session):
    kv = allocator.alloc(len(ids))
    compute(pool, kv, ids, 0)
    result = cache.insert(InsertParams(key=key(ids), value=kv, session_id=session))
    for s, e in duplicate_ranges(result):
        allocator.free(kv[s:e])


def request(rid, ids):
    req = make_req(rid, ids)
    req.refresh_fill_ids()
    return req


def matched(cache, ids):
    return cache.match_prefix(MatchPrefixParams(key=key(ids))).device_prefix_len


S = list(range(100, 110))
A1, A2, B1 = list(range(200, 240)), list(range(300, 310)), list(range(400, 440))


def test_front_of_a_history_is_restored_from_host_byte_for_byte():
    cache, allocator, pool = make_host_cache({}, 256, 1000)
    insert(cache, allocator, pool, S + A1, "a")
    insert(cache, allocator, pool, S + A1 + A2, "a")
    insert(cache, allocator, pool, S + B1, "b")
    insert(cache, allocator, pool, S + B1 + [999], "b")  # b touched last
    free_before = allocator.available_size()
    assert cache.evict(EvictParams(num_tokens=30)).num_tokens_evicted == len(A1)
    assert allocator.available_size() == free_before + len(A1)  # slots really freed
    assert matched(cache, S + A1 + A2) == len(S)  # a gap at A1, the tail A2 kept
    assert cache.tree.host.used == len(A1) == cache.tree.host.num_stored_tokens
    # the freed slots get reused by someone else: garbage in them
    junk = allocator.alloc(allocator.available_size())
    for layer in range(LAYERS):
        pool.k_buffer[layer][junk] = -7.0
    allocator.free(junk)

    req = request("a3", S + A1 + A2 + [7, 8])
    assert cache.restore_host_segments(req) == len(A1)
    assert matched(cache, S + A1 + A2 + [7, 8]) == len(S + A1 + A2)
    assert cache.tree.host.used == 0 and cache.tree.host.num_restored_tokens == len(A1)
    assert_tree_rows_exact(cache, pool)
    cache.tree.check()
    assert cache.restore_host_segments(req) == 0  # nothing left to restore


def test_a_whole_history_stays_as_hollow_keys_with_its_copy_and_comes_back():
    cache, allocator, pool = make_host_cache({}, 256, 1000)
    insert(cache, allocator, pool, S + A1 + A2, "a")
    cache.evict(EvictParams(num_tokens=len(S + A1 + A2)))
    assert cache.total_size() == 0 and cache.tree.host.used == len(S + A1 + A2)
    assert len(list(cache.tree.nodes())) >= 1  # keys kept: restorable, not pruned
    cache.tree.check()
    req = request("a2", S + A1 + A2 + [5])
    assert cache.restore_host_segments(req) == len(S + A1 + A2)
    assert matched(cache, S + A1 + A2 + [5]) == len(S + A1 + A2)
    assert_tree_rows_exact(cache, pool)


def test_a_full_tier_drops_the_oldest_copy_and_prunes_what_it_leaves_useless():
    cache, allocator, pool = make_host_cache({}, 256, 50)
    insert(cache, allocator, pool, S + A1, "a")
    insert(cache, allocator, pool, S + B1, "b")
    cache.evict(EvictParams(num_tokens=len(S + A1 + B1)))
    assert cache.tree.host.used <= 50
    cache.tree.check()
    # private histories first, a's (older) first: b's copy pushed a's out, and
    # a's keys went with it; the shared S fits next to b's
    assert cache.tree.host.used == len(S + B1) == 50
    assert cache.restore_host_segments(request("a", S + A1 + [1])) == len(S)
    assert matched(cache, S + A1) == len(S)
    assert cache.restore_host_segments(request("b", S + B1 + [1])) == len(B1)
    assert_tree_rows_exact(cache, pool)


def test_a_match_ending_inside_a_host_copy_splits_it():
    cache, allocator, pool = make_host_cache({}, 256, 1000)
    insert(cache, allocator, pool, S + A1, "a")
    cache.evict(EvictParams(num_tokens=len(S + A1)))
    req = request("a-part", S + A1[:15] + [77, 78])  # diverges inside A1
    assert cache.restore_host_segments(req) == len(S) + 15
    assert matched(cache, S + A1[:15] + [77]) == len(S) + 15
    assert cache.tree.host.used == len(A1) - 15  # the rest of A1 stays on the host
    cache.tree.check()
    assert_tree_rows_exact(cache, pool)
    assert cache.restore_host_segments(request("a-rest", S + A1 + [1])) == len(A1) - 15
    assert_tree_rows_exact(cache, pool)


def test_a_host_tier_without_a_kv_pool_is_refused():
    allocator, req_pool = make_pools(64)  # an allocator without a KV pool
    with pytest.raises(ValueError, match="KV pool"):
        GapRadixCache(cache_params(allocator, req_pool), PenelopePolicy(), host_tier_tokens=10)


# ------------------------------------------------------------------ properties
class HostHarness(Harness):
    """``test_gap_cache``'s harness on a real KV pool with a host tier: every
    computed token gets its rows, and ``restore`` brings host copies back."""

    def __init__(self, host_tokens):
        cache, allocator, self.pool = make_host_cache({}, POOL, host_tokens)
        super().__init__(None, (cache, allocator))
        self.rids = itertools.count()

    def compute(self, slots, ids, start):
        compute(self.pool, slots, ids, start)

    def restore(self, session):
        ids = self.history[session] + [next(self.tokens)]
        before = matched(self.cache, ids)
        restored = self.cache.restore_host_segments(request(f"r{next(self.rids)}", ids))
        assert matched(self.cache, ids) >= before + restored

    def check(self):
        super().check()
        host = self.cache.tree.host
        live = [n.host_copy for n in self.cache.tree.nodes() if n.host_copy is not None]
        assert all(c.live for c in live) and sum(c.tokens for c in live) == host.used <= host.capacity
        assert host.num_copies == self.cache.host.num_live == len(live)
        assert all(n.on_host == (n.host_copy is not None) for n in self.cache.tree.nodes())
        assert_tree_rows_exact(self.cache, self.pool)


host_ops = st.lists(st.one_of(op, st.tuples(st.just("restore"), sessions)), min_size=15, max_size=60)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=host_ops, host_tokens=st.sampled_from([40, 400]))
def test_restored_kv_is_exact_and_the_tier_stays_within_capacity(steps, host_tokens):
    HostHarness(host_tokens).run(steps)
