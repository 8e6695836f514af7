"""The gap-capable prefix cache (server/sglang/cache/gap_cache.py) on real SGLang
allocator objects on CPU: known answers for Penelope's order and gaps, and
property tests of slot ownership, locks and allocator accounting."""

from __future__ import annotations

import itertools
from array import array
from types import SimpleNamespace

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .sglang_env import cache_params, make_pools, make_req, publish_test_server_args

# isort: split
# (SGLang only after .sglang_env, which installs the sgl_kernel stub)
from sglang.srt.mem_cache.base_prefix_cache import (
    EvictParams,
    InsertParams,
    MatchPrefixParams,
)
from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey

from policies.cache.lru import LruPolicy
from policies.cache.penelope import PenelopePolicy
from server.sglang.cache.gap_cache import (
    GAP_CACHE_BACKEND,
    GAP_CACHE_SYMBOLS,
    GapRadixCache,
    duplicate_ranges,
    register_gap_cache,
)
from server.sglang.launch import contract

S = list(range(100, 120))   # shared system prompt, 20 tokens
A1, A2, A3 = list(range(200, 230)), list(range(300, 330)), list(range(500, 530))
B1, B2 = list(range(400, 430)), list(range(600, 630))


@pytest.fixture(autouse=True)
def sglang_config():
    publish_test_server_args()
    yield


def key(ids):
    return RadixKey(array("q", ids))


def make_cache(policy, num_tokens=256):
    allocator, req_pool = make_pools(num_tokens)
    ticks = itertools.count()
    cache = GapRadixCache(cache_params(allocator, req_pool), policy, clock=lambda: float(next(ticks)))
    return cache, allocator


def insert(cache, allocator, ids, session=None):
    """A finished request's insert: fresh slots for every token, duplicates freed."""
    kv = allocator.alloc(len(ids))
    result = cache.insert(InsertParams(key=key(ids), value=kv, session_id=session))
    for s, e in duplicate_ranges(result):
        allocator.free(kv[s:e])
    return kv, result


def matched(cache, ids):
    return cache.match_prefix(MatchPrefixParams(key=key(ids))).device_prefix_len


def agent_history(policy):
    """Two sessions over one system prompt; ``a`` has two turns, ``b`` was touched last."""
    cache, allocator = make_cache(policy)
    insert(cache, allocator, S + B1, "b")
    insert(cache, allocator, S + A1, "a")
    _, result = insert(cache, allocator, S + A1 + A2, "a")
    matched(cache, S + B1)
    return cache, allocator, cache.path_device_indices(result.last_device_node)  # a's slots


def test_front_of_a_private_history_is_evicted_first_and_leaves_a_gap():
    cache, allocator, kv = agent_history(PenelopePolicy())
    assert cache.evict(EvictParams(num_tokens=1)).num_tokens_evicted == 30
    cache.tree.check()
    assert matched(cache, S + A1 + A2 + [7]) == 20  # stops at the first gap
    gm = cache.match_with_gaps(key(S + A1 + A2 + [7]))
    assert gm.gaps == [(20, 50)] and gm.matched_len == 80
    assert [(s, e) for s, e, _ in gm.tail] == [(50, 80)]
    assert torch.equal(gm.tail[0][2], kv[50:80])  # A2's own slots, untouched
    assert matched(cache, S + B1) == 50


def test_lru_through_the_gap_cache_evicts_the_tail():
    cache, allocator, _ = agent_history(LruPolicy())
    cache.evict(EvictParams(num_tokens=1))
    cache.tree.check()
    assert matched(cache, S + A1 + A2) == 50 and matched(cache, S + B1) == 50


def test_filling_a_gap_restores_a_contiguous_match():
    cache, allocator, kv = agent_history(PenelopePolicy())
    cache.evict(EvictParams(num_tokens=1))
    gm = cache.match_with_gaps(key(S + A1 + A2))
    lock = cache.lock(gm.last_node)
    fresh = allocator.alloc(30)
    assert cache.fill_gap(gm.last_node, 20, 50, fresh) == [(20, 50)]
    cache.unlock(lock)
    cache.tree.check()
    result = cache.match_prefix(MatchPrefixParams(key=key(S + A1 + A2)))
    assert result.device_prefix_len == 80
    path = cache.path_device_indices(result.last_device_node)
    assert torch.equal(path, torch.cat([kv[:20], fresh, kv[50:80]]))
    assert allocator.available_size() + cache.total_size() == 256


def test_a_gap_another_insert_filled_meanwhile_keeps_its_slots():
    cache, allocator, kv = agent_history(PenelopePolicy())
    cache.evict(EvictParams(num_tokens=1))
    gm = cache.match_with_gaps(key(S + A1 + A2))
    lock = cache.lock(gm.last_node)  # request 1 starts recomputing the gap
    mine = allocator.alloc(30)
    theirs = allocator.alloc(60)  # request 2 recomputed past the prefix and finishes first
    result = cache.insert(InsertParams(key=key(S + A1 + A2), value=torch.cat([kv[:20], theirs])))
    for s, e in duplicate_ranges(result, start=20):
        allocator.free(torch.cat([kv[:20], theirs])[s:e])
    assert cache.fill_gap(gm.last_node, 20, 50, mine) == []  # nothing taken: request 1 frees it
    allocator.free(mine)
    cache.unlock(lock)
    cache.tree.check()
    assert torch.equal(cache.path_device_indices(gm.last_node), torch.cat([kv[:20], theirs[:30], kv[50:80]]))
    assert allocator.available_size() + cache.total_size() == 256


def test_shared_system_prompt_survives_eviction_of_all_private_history():
    cache, allocator = make_cache(PenelopePolicy())
    for ids, session in ((S + A1, "a"), (S + B1, "b"), (S + A1 + A2, "a"), (S + B1 + B2, "b")):
        insert(cache, allocator, ids, session)
    assert cache.evict(EvictParams(num_tokens=120)).num_tokens_evicted == 120
    cache.tree.check()
    assert matched(cache, S + A1) == 20 and cache.total_size() == 20
    assert [len(n.key) for n in cache.tree.nodes()] == [20]  # hollow nodes with nothing after went


def test_insert_through_a_gap_adopts_only_the_gap_and_the_new_tail():
    cache, allocator, kv = agent_history(PenelopePolicy())
    cache.evict(EvictParams(num_tokens=1))
    before = allocator.available_size()
    fresh = allocator.alloc(90)  # the request recomputed everything after the prefix
    value = torch.cat([kv[:20], fresh])
    result = cache.insert(InsertParams(key=key(S + A1 + A2 + A3), value=value, session_id="a"))
    assert result.prefix_len == 80 and result.adopted_ranges[next(iter(result.adopted_ranges))] == [
        (20, 50), (80, 110)]
    assert duplicate_ranges(result, start=20) == [(50, 80)]
    for s, e in duplicate_ranges(result, start=20):
        allocator.free(value[s:e])
    cache.tree.check()
    assert allocator.available_size() == before - 60
    assert torch.equal(cache.match_with_gaps(key(S + A1 + A2 + A3)).prefix_indices,
                       torch.cat([kv[:20], fresh[:30], kv[50:80], fresh[60:]]))


def test_checkpoint_of_a_request_that_recomputed_past_a_gap():
    cache, allocator, kv = agent_history(PenelopePolicy())
    _, req_pool = cache.token_to_kv_pool_allocator, cache.req_to_token_pool
    cache.evict(EvictParams(num_tokens=1))
    ids = S + A1 + A2 + A3
    req = make_req("r", ids)
    m = cache.match_prefix(MatchPrefixParams(key=key(ids)))
    req.lock, req.last_node = cache.lock(m.last_device_node), m.last_device_node
    req.kv.req_pool_idx = req_pool.alloc_rows(1)[0]
    req.kv.cache_protected_len = m.device_prefix_len
    fresh = allocator.alloc(len(ids) - m.device_prefix_len)
    req_pool.write((req.kv.req_pool_idx, slice(0, len(ids))),
                   torch.cat([cache.path_device_indices(m.last_device_node), fresh]).to(torch.int32))
    req.full_untruncated_fill_ids = array("q", ids)
    cache.checkpoint(req, up_to=len(ids))
    cache.tree.check()
    assert req.kv.cache_protected_len == 110 and matched(cache, ids + [1]) == 110
    row = req_pool.req_to_token[req.kv.req_pool_idx, :110].to(torch.int64)
    assert torch.equal(row, cache.path_device_indices(req.last_node))
    cache.unlock(req.lock)
    assert allocator.available_size() + cache.total_size() == 256  # A2's recomputed copy was freed


def test_locked_nodes_are_never_evicted_and_a_gap_unlocked_without_tail_goes():
    cache, allocator, _ = agent_history(PenelopePolicy())
    cache.evict(EvictParams(num_tokens=1))  # A1 hollow
    gm = cache.match_with_gaps(key(S + A1))  # ends in the hollow node
    lock = cache.lock(gm.last_node)
    cache.evict(EvictParams(num_tokens=1000))
    cache.tree.check()
    assert cache.match_with_gaps(key(S + A1)).matched_len == 50  # kept: locked
    assert matched(cache, S) == 20  # the locked path keeps its KV
    cache.unlock(lock)
    cache.tree.check()
    assert cache.match_with_gaps(key(S + A1)).matched_len == 20  # hollow, no tail: pruned


def test_lru_gap_cache_evicts_what_sglangs_radix_cache_evicts():
    seqs = ([1, 2, 3, 4, 5, 6], [1, 2, 3, 7, 8], [9, 10, 11], [1, 2, 12, 13, 14, 15], [9, 10, 16])
    kept = {}
    for name in ("sglang", "gap"):
        allocator, req_pool = make_pools(512)
        if name == "sglang":
            tree = RadixCache(cache_params(allocator, req_pool))
        else:
            tree = GapRadixCache(cache_params(allocator, req_pool), LruPolicy())
        for seq in seqs:
            kv = allocator.alloc(len(seq))
            res = tree.insert(InsertParams(key=key(seq), value=kv))
            allocator.free(kv[:res.prefix_len])
        tree.evict(EvictParams(num_tokens=6))
        kept[name] = sorted(tuple(s[:matched(tree, s)]) for s in seqs)
        assert allocator.available_size() + tree.evictable_size() == 512
    assert kept["gap"] == kept["sglang"]


def test_registered_through_sglangs_registry():
    from sglang.srt.mem_cache.registry import get_radix_cache_factory

    assert contract.problems(GAP_CACHE_SYMBOLS) == []
    assert register_gap_cache(LruPolicy()) == register_gap_cache(PenelopePolicy()) == GAP_CACHE_BACKEND
    allocator, req_pool = make_pools()
    ctx = SimpleNamespace(params=cache_params(allocator, req_pool), is_hybrid_swa=False,
                          is_hybrid_ssm=False, enable_hierarchical_cache=False, disable_radix_cache=False)
    cache = get_radix_cache_factory(GAP_CACHE_BACKEND)(ctx)
    assert isinstance(cache, GapRadixCache) and isinstance(cache.policy, PenelopePolicy)
    with pytest.raises(ValueError, match="is_hybrid_swa"):
        get_radix_cache_factory(GAP_CACHE_BACKEND)(SimpleNamespace(**{**vars(ctx), "is_hybrid_swa": True}))


# ------------------------------------------------------------------ properties
POOL = 192
sessions = st.integers(0, 3)
op = st.one_of(
    st.tuples(st.just("turn"), sessions, st.integers(1, 30)),
    st.tuples(st.just("turn"), sessions, st.integers(1, 30)),
    st.tuples(st.just("start"), sessions, st.integers(1, 40), st.floats(0.3, 1.0)),
    st.tuples(st.just("finish"), st.integers(0, 7)),
    st.tuples(st.just("evict"), st.integers(1, 120)),
    st.tuples(st.just("fill"), sessions),
)
ops = st.lists(op, min_size=15, max_size=60)


class Harness:
    """Requests as SGLang runs them: match, lock, allocate the rest, insert, unlock."""

    def __init__(self, policy, cache=None):
        self.cache, self.allocator = cache or make_cache(policy, POOL)
        self.tokens = itertools.count(10_000)
        self.system = [next(self.tokens) for _ in range(12)]
        self.history = {s: list(self.system) for s in range(4)}
        self.live = []  # (ids, prefix_len, own slots, lock)

    def alloc(self, n):
        short = n - self.allocator.available_size()
        if short > 0:
            self.cache.evict(EvictParams(num_tokens=short))
        return self.allocator.alloc(n)

    def start(self, session, new_tokens, keep):
        past = self.history[session]
        ids = past[:max(1, int(len(past) * keep))] + [next(self.tokens) for _ in range(new_tokens)]
        m = self.cache.match_prefix(MatchPrefixParams(key=key(ids)))
        lock = self.cache.lock(m.last_device_node)
        own = self.alloc(len(ids) - m.device_prefix_len)
        if own is None:
            self.cache.unlock(lock)
            return
        prefix = self.cache.path_device_indices(m.last_device_node)
        assert len(prefix) == m.device_prefix_len
        self.compute(own, ids[len(prefix):], len(prefix))
        self.live.append((session, ids, prefix, own, lock))

    def compute(self, slots, ids, start):
        """The forward over ``ids`` at positions ``start``... into ``slots`` (no KV pool here)."""

    def turn(self, session, new_tokens):
        """A whole turn: the session resends its history plus new tokens."""
        before = len(self.live)
        self.start(session, new_tokens, 1.0)
        if len(self.live) > before:
            self.finish(len(self.live) - 1)

    def finish(self, i):
        if not self.live:
            return
        session, ids, prefix, own, lock = self.live.pop(i % len(self.live))
        value = torch.cat([prefix, own])
        result = self.cache.insert(InsertParams(key=key(ids), value=value, session_id=str(session)))
        for s, e in duplicate_ranges(result, start=len(prefix)):
            self.allocator.free(value[s:e])
        self.cache.unlock(lock)
        self.history[session] = ids

    def evict(self, n):
        locked = [(n_, n_.value.clone()) for n_ in self.cache.tree.nodes() if n_.lock_ref and not n_.hollow]
        self.cache.evict(EvictParams(num_tokens=n))
        for node, value in locked:
            assert node.parent is not None and torch.equal(node.value, value), "a locked node was evicted"
        for ids in self.history.values():  # re-match: nothing a live request owns comes back
            gm = self.cache.match_with_gaps(key(ids))
            returned = set(gm.prefix_indices.tolist())
            for _, _, slots in gm.tail:
                returned |= set(slots.tolist())
            assert not returned & self.request_slots()

    def fill(self, session):
        gm = self.cache.match_with_gaps(key(self.history[session]))
        if not gm.gaps:
            return
        lock = self.cache.lock(gm.last_node)
        start, end = gm.gaps[0]
        slots = self.alloc(end - start)
        if slots is not None:
            self.compute(slots, self.history[session][start:end], start)
            taken = self.cache.fill_gap(gm.last_node, start, end, slots)
            assert taken == [(start, end)]
            assert matched(self.cache, self.history[session]) >= end
        self.cache.unlock(lock)

    def run(self, steps):
        """Every step, then every live request finished, checking after each."""
        for name, *args in steps:
            getattr(self, name)(*args)
            self.check()
        while self.live:
            self.finish(0)
        self.check()
        assert self.cache.protected_size() == 0

    def request_slots(self):
        return {int(x) for *_, own, _ in self.live for x in own.tolist()}

    def check(self):
        self.cache.tree.check()
        tree = torch.cat(self.cache.owned_slots()).tolist() if self.cache.owned_slots() else []
        assert len(tree) == len(set(tree)), "a slot owned by two nodes"
        ours = [int(x) for *_, own, _ in self.live for x in own.tolist()]
        assert len(ours) == len(set(ours)) and not set(ours) & set(tree)
        free = set(self.allocator.free_pages.tolist()) | set(self.allocator.release_pages.tolist())
        assert not free & (set(tree) | set(ours)), "a free slot is also owned"
        assert self.allocator.available_size() + len(tree) + len(ours) == POOL
        assert len(tree) == self.cache.total_size()
        for *_, prefix, _, lock in self.live:  # a running request's prefix stays put
            assert torch.equal(self.cache.path_device_indices(lock.node)[:len(prefix)], prefix)


@pytest.mark.parametrize("policy", [PenelopePolicy(), PenelopePolicy(system_prompt_tokens=12), LruPolicy()],
                         ids=["penelope", "penelope_sys12", "lru"])
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=ops)
def test_slot_ownership_locks_and_accounting_hold_under_random_agent_sessions(policy, steps):
    Harness(policy).run(steps)
