"""The router twins of SMG 1.13 on hand-built views (pure): known answers and properties."""

from __future__ import annotations

import struct

import pytest
from blake3 import blake3
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.router import NoHealthyWorker, RouterNeeds, RouterPolicy, RouteView, WorkerView, check_decision
from policies.router.cache_aware import CacheAwarePolicy
from policies.router.consistent_hashing import ConsistentHashingPolicy
from policies.router.least_load import LeastLoadPolicy
from policies.router.power_of_two import PowerOfTwoPolicy
from policies.router.prefix_hash import PrefixHashPolicy
from policies.router.random import RandomPolicy
from policies.router.ring import VIRTUAL_NODES, HashRing, RingCache, ring_position
from policies.router.round_robin import RoundRobinPolicy
from policies.router.tree import CharTree

pytestmark = pytest.mark.policy

URLS = ("http://w1:8000", "http://w2:8000", "http://w3:8000")
ALL = (RoundRobinPolicy, RandomPolicy, LeastLoadPolicy, PowerOfTwoPolicy, ConsistentHashingPolicy,
       PrefixHashPolicy, CacheAwarePolicy)


def fleet(loads=(0, 0, 0), healthy=None, urls=URLS) -> tuple[WorkerView, ...]:
    healthy = healthy or (True,) * len(loads)
    return tuple(WorkerView(u, n, h) for u, n, h in zip(urls, loads, healthy, strict=False))


def view(text="", loads=(0, 0, 0), draw=0, healthy=None, key=None, tokens=(), urls=URLS) -> RouteView:
    return RouteView(text=text, workers=fleet(loads, healthy, urls), draw=draw, token_ids=tokens, routing_key=key)


def brute_find(urls, key, healthy=lambda u: True):
    """The ring lookup written out: every vnode, sorted, first healthy at or after the key."""
    nodes = sorted((ring_position(f"{u}#{i}"), u) for u in dict.fromkeys(urls) for i in range(VIRTUAL_NODES))
    p = ring_position(key)
    after = [u for pos, u in nodes if pos >= p] + [u for pos, u in nodes if pos < p]
    return next((u for u in after if healthy(u)), None)


# --------------------------------------------------------------------------- ring and hashes
def test_hashes_are_the_published_blake3_and_xxh3():
    # BLAKE3("abc") = 6437b3ac38465133...; the ring reads its first 8 bytes little-endian
    assert blake3(b"abc").hexdigest().startswith("6437b3ac38465133")
    assert ring_position("abc") == 0x33514638ACB33764
    # XXH3_64(empty, seed 0) = 2D06800538D394C2: prefix_hash's ring key of empty bytes
    p = PrefixHashPolicy()
    assert p.ring_key(view(key="")) == "2d06800538d394c2"
    assert p.ring_key(view(key="abc")) == "78af5f94892f3950"


def test_ring_matches_the_brute_force_lookup_and_ignores_list_order():
    ring, reordered = HashRing(URLS), HashRing(URLS[::-1] + URLS[:1])
    assert len(reordered.urls) == 3  # a repeated URL keeps no extra weight
    for i in range(300):
        key = f"key-{i}"
        assert ring.find(key, lambda u: True) == brute_find(URLS, key) == reordered.find(key, lambda u: True)
        down = URLS[i % 3]
        assert ring.find(key, lambda u, d=down: u != d) == brute_find(URLS, key, lambda u, d=down: u != d)
    assert ring.find("k", lambda u: False) is None and HashRing(()).find("k", lambda u: True) is None
    # pinned answers of this ring (guards the vnode key format "url#i")
    assert [ring.find(f"key-{i}", lambda u: True) for i in range(6)] == [URLS[0], URLS[1], URLS[2], URLS[0],
                                                                          URLS[1], URLS[1]]


def test_ring_cache_is_bounded_and_reuses_rings():
    cache = RingCache(limit=2)
    a = cache.ring(URLS)
    assert cache.ring(URLS) is a
    cache.ring(URLS[:2])
    cache.ring(URLS[:1])
    assert cache.ring(URLS) is not a  # evicted (oldest first), rebuilt equal
    assert cache.ring(URLS).find("x", lambda u: True) == a.find("x", lambda u: True)


# --------------------------------------------------------------------------- round robin, random, load
def test_round_robin_cycles_from_zero_and_reindexes_over_healthy():
    rr = RoundRobinPolicy()
    assert [rr.route(view()).worker for _ in range(4)] == [0, 1, 2, 0]
    # counter is 4: healthy [0, 2] -> healthy[4 % 2] = 0, then healthy[5 % 2] = 2
    picks = [rr.route(view(healthy=(True, False, True))).worker for _ in range(3)]
    assert picks == [0, 2, 0]
    assert rr.needs == RouterNeeds("round_robin", ())


def test_random_and_least_load_use_the_draw():
    assert [RandomPolicy().route(view(draw=d)).worker for d in range(4)] == [0, 1, 2, 0]
    assert RandomPolicy().route(view(draw=1, healthy=(False, True, True))).worker == 2
    ll = LeastLoadPolicy()
    assert ll.route(view(loads=(3, 1, 1), draw=0)).worker == 1
    assert ll.route(view(loads=(3, 1, 1), draw=1)).worker == 2
    assert ll.route(view(loads=(0, 1, 1), draw=1, healthy=(False, True, True))).worker == 2


def test_power_of_two_samples_two_distinct_and_takes_the_lighter():
    p2 = PowerOfTwoPolicy()
    # low 32 bits 0 -> i1 = 0; high 32 bits 0 -> i2 = (0 + 1 + 0) % 3 = 1
    assert p2.route(view(loads=(5, 2, 0), draw=0)).worker == 1
    # high = 1 -> i2 = (0 + 1 + 1) % 3 = 2
    assert p2.route(view(loads=(5, 2, 0), draw=1 << 32)).worker == 2
    # i1 = 2, i2 = (2 + 1 + 0) % 3 = 0: the pair (2, 0) never holds worker 1, however idle
    assert p2.route(view(loads=(5, 0, 3), draw=2)).worker == 2
    assert PowerOfTwoPolicy("least_requests").route(view(loads=(5, 0, 3), draw=2)).worker == 1
    assert p2.route(view(loads=(5, 0, 3), healthy=(True, False, False))).worker == 0
    assert p2.needs.gateway_flags == (("--power-of-two-load-metric", "expected_wait"),)
    with pytest.raises(ValueError, match="load_metric"):
        PowerOfTwoPolicy("fastest")


# --------------------------------------------------------------------------- prefix_hash
def test_prefix_hash_key_bytes_priority_and_spans():
    p = PrefixHashPolicy(prefix_token_count=3)
    assert p.key_bytes(view(text="x" * 50, tokens=(1, 2), key="sess")) == b"sess"
    assert p.key_bytes(view(text="x" * 50, tokens=(1, 2, 3, 4, 5))) == struct.pack("<3I", 1, 2, 3)
    assert p.key_bytes(view(text="héllo wörld!!")) == "héllo wörld!".encode()  # 12 chars, not bytes
    assert p.key_bytes(view()) is None
    assert p.route(view(loads=(2, 1, 1))).branch == "no_routing_key"
    assert p.route(view(loads=(2, 1, 1))).worker == 1  # first of the least loaded


def test_prefix_hash_shares_a_worker_exactly_when_the_first_1024_chars_agree():
    p = PrefixHashPolicy()
    head = "s" * 1024
    assert p.ring_key(view(text=head + "a")) == p.ring_key(view(text=head + "b"))
    assert p.ring_key(view(text="t" + head[1:] + "a")) != p.ring_key(view(text=head + "a"))
    target = p.route(view(text=head)).worker
    assert p.route(view(text=head + "anything")).worker == target
    assert target == URLS.index(brute_find(URLS, p.ring_key(view(text=head))))


def test_prefix_hash_load_gate_spills_past_sixteen_of_three_idle():
    p = PrefixHashPolicy()
    text = "prompt " * 200
    t = p.route(view(text=text)).worker
    assert p.route(view(text=text)).branch == "ring_hit"
    loads = [0, 0, 0]
    loads[t] = 15  # avg = 16/3, threshold = max(6.67, 15.33): 15 passes
    assert p.route(view(text=text, loads=tuple(loads))).worker == t
    loads[t] = 16  # avg = 17/3, threshold 15.67: spills to the first least-loaded
    d = p.route(view(text=text, loads=tuple(loads)))
    assert d.branch == "load_balance_walk" and d.worker == min(i for i in range(3) if i != t)
    # every worker over the gate (impossible with one gate for all, unless unhealthy skew): target kept
    assert p.load_ok(0, 0, 3) and not p.load_ok(16, 16, 3)
    assert p.needs.gateway_flags == (("--prefix-token-count", "256"), ("--prefix-hash-load-factor", "1.25"),
                                     ("--prefix-hash-balance-abs-threshold", "10"))


def test_prefix_hash_validates_fields():
    for kw, field in (({"prefix_token_count": 0}, "prefix_token_count"), ({"load_factor": 0.9}, "load_factor"),
                      ({"balance_abs_threshold": -1}, "balance_abs_threshold")):
        with pytest.raises(ValueError, match=field):
            PrefixHashPolicy(**kw)


# --------------------------------------------------------------------------- consistent hashing
def test_consistent_hashing_routes_keys_on_the_ring_and_the_rest_at_random():
    ch = ConsistentHashingPolicy()
    for i in range(50):
        key = f"session-{i}"
        assert URLS[ch.route(view(key=key, loads=(99, 0, 0))).worker] == brute_find(URLS, key)
    assert [ch.route(view(draw=d)).branch for d in range(2)] == ["random", "random"]
    assert ch.route(view(draw=4)).worker == 1


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32))
def test_consistent_hashing_adding_a_fifth_worker_moves_about_a_fifth_only_to_it(seed):
    urls4 = tuple(f"http://10.0.{seed % 251}.{i}:8000" for i in range(4))
    urls5 = urls4 + (f"http://10.0.{seed % 251}.9:8000",)
    ch4, ch5 = ConsistentHashingPolicy(), ConsistentHashingPolicy()
    keys = [f"k{seed}-{i}" for i in range(600)]
    before = [urls4[ch4.route(view(key=k, loads=(0,) * 4, urls=urls4)).worker] for k in keys]
    after = [urls5[ch5.route(view(key=k, loads=(0,) * 5, urls=urls5)).worker] for k in keys]
    moved = [(b, a) for b, a in zip(before, after, strict=True) if a != b]
    assert all(a == urls5[-1] for _, a in moved)
    assert 0.08 < len(moved) / len(keys) < 0.35
    # an unhealthy worker's keys go where they would with it removed; no other key moves
    down = [urls5[ch5.route(view(key=k, loads=(0,) * 5, urls=urls5, healthy=(True,) * 4 + (False,))).worker]
            for k in keys]
    assert down == before


# --------------------------------------------------------------------------- cache_aware
def test_char_tree_match_split_and_tenants():
    t = CharTree()
    t.insert("hello world", "A")
    t.insert("hello there", "B")
    assert t.match("hello world") == (11, ["A"])
    assert t.match("hello") == (5, ["A", "B"])  # stops inside the shared edge "hello "
    assert t.match("hello wx") == (7, ["A"])    # partial match of "world": that child's tenants
    assert t.match("xyz") == (0, [])
    assert t.chars == {"A": 11, "B": 11}
    t.check()
    t.evict(12)  # oldest tenant-leaf first: A's "world" (5 chars), then still 17 > 12: A's "hello "
    assert t.chars == {"A": 0, "B": 11} and t.match("hello world") == (6, ["B"])
    t.check()
    t.remove_tenant("B")
    assert t.match("hello") == (0, []) and t.total_chars == 0


def test_cache_aware_hit_miss_threshold_and_insert():
    ca = CacheAwarePolicy()
    a100 = "a" * 100
    first = ca.route(view(text=a100, draw=1))
    assert (first.worker, first.branch) == (1, "expected_wait_fallback")  # empty tree: ties[1 % 3]
    assert ca.route(view(text=a100, draw=0)).worker == 1  # 100/100: the holder
    assert ca.route(view(text=a100 + "b" * 150, draw=2)).worker == 1  # 100/250 = 0.4 > 0.3
    miss = ca.route(view(text="a" * 60 + "c" * 190, draw=3, loads=(0, 0, 5)))  # 60/250 = 0.24: a miss
    assert miss.branch == "expected_wait_fallback" and miss.worker == 1  # ties (0, 1): 3 % 2 -> 1
    exact = CacheAwarePolicy(cache_threshold=0.5)
    exact.route(view(text="x" * 50, draw=0))  # worker 0 holds "x"*50
    assert exact.route(view(text="x" * 50 + "y" * 50, draw=2)).branch == "expected_wait_fallback"  # 0.5: not >


def test_cache_aware_spill_gate_uses_the_113_margin():
    def holder_at(load, background=0):
        ca = CacheAwarePolicy()
        ca.route(view(text="p" * 100, draw=1))  # worker 1 holds it
        loads = (background, load, background)
        return ca.route(view(text="p" * 100, loads=loads, draw=1 << 32))
    # idle fleet of 3: mean 2 at load 6 (6 > 3 but not > 2 + 4), mean 7/3 at load 7 (> 7/3 + 4)
    assert holder_at(6).branch == "tree_match"
    spill = holder_at(7)
    assert spill.branch == "spill" and spill.worker == 2  # least loaded (0, 2): high draw 1 -> 2
    # 30/30/30 background: margin 2*sqrt(mean) ~ 12.7, the relative gate binds: 61 > 1.5 * 40.33 spills
    assert holder_at(60, 30).branch == "tree_match" and holder_at(61, 30).branch == "spill"
    assert CacheAwarePolicy().spill_margin(0.0) == 4.0
    assert CacheAwarePolicy(balance_abs_threshold=2).spill_margin(100.0) == 2.0


def test_cache_aware_spill_replicates_and_unhealthy_holders_fall_back():
    ca = CacheAwarePolicy()
    ca.route(view(text="q" * 100, draw=0))  # worker 0
    assert ca.route(view(text="q" * 100, loads=(7, 0, 0), draw=0)).worker == 1  # spill: ties (1, 2), high 0
    assert set(ca.tree.match("q" * 100)[1]) == {URLS[0], URLS[1]}
    assert ca.route(view(text="q" * 100, loads=(3, 2, 0))).worker == 1  # hit: the lighter holder
    d = ca.route(view(text="q" * 100, healthy=(False, False, True)))
    assert (d.worker, d.branch) == (2, "first_healthy_fallback")
    assert URLS[2] not in ca.tree.match("q" * 100)[1]  # no insert on that branch
    # a worker that leaves the fleet is purged from the tree
    ca.route(view(text="zz", loads=(0, 0), urls=URLS[1:]))
    assert ca.tree.match("q" * 100)[1] == [URLS[1]]


def test_cache_aware_flags_and_validation():
    assert CacheAwarePolicy().needs == RouterNeeds("cache_aware", (
        ("--cache-threshold", "0.3"), ("--balance-abs-threshold", "64"), ("--balance-rel-threshold", "1.5"),
        ("--eviction-interval-secs", "60"), ("--max-tree-size", "67108864")))
    for kw, field in (({"cache_threshold": 1.5}, "cache_threshold"), ({"max_tree_size": 0}, "max_tree_size"),
                      ({"balance_abs_threshold": -1}, "balance_abs_threshold"),
                      ({"eviction_interval_secs": 0}, "eviction_interval_secs")):
        with pytest.raises(ValueError, match=field):
            CacheAwarePolicy(**kw)


def test_cache_aware_evicts_by_size_oldest_first():
    ca = CacheAwarePolicy(max_tree_size=160)
    for i, c in enumerate("abcd"):
        ca.route(view(text=c * 50, draw=i))  # 200 chars > 160 + 10: evict to 160
    assert ca.tree.total_chars <= 160 and ca.tree.match("a" * 50) == (0, [])
    assert ca.tree.match("d" * 50)[0] == 50
    ca.tree.check()


texts = st.text(alphabet="abc", min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(texts, st.sampled_from("TUVW")), min_size=1, max_size=25), texts)
def test_char_tree_match_equals_the_longest_common_prefix(inserts, probe):
    tree = CharTree()
    for text, tenant in inserts:
        tree.insert(text, tenant)
    tree.check()

    def lcp(a: str, b: str) -> int:
        return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    best = max(lcp(probe, text) for text, _ in inserts)
    matched, tenants = tree.match(probe)
    assert matched == best
    expected = {tn for text, tn in inserts if lcp(probe, text) >= best} if best else set()
    assert set(tenants) == expected


# --------------------------------------------------------------------------- every policy
workers_st = st.integers(1, 6).flatmap(lambda n: st.tuples(
    st.lists(st.integers(0, 40), min_size=n, max_size=n),
    st.lists(st.booleans(), min_size=n, max_size=n).filter(any)))
calls = st.lists(st.tuples(workers_st, st.integers(0, 2**64 - 1), texts, st.one_of(st.none(), texts)),
                 min_size=1, max_size=15)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(ALL), calls)
def test_every_decision_names_a_healthy_worker(cls, seq):
    policy = cls()
    assert isinstance(policy, RouterPolicy)
    for (loads, healthy), draw, text, key in seq:
        urls = tuple(f"http://h{i}:8000" for i in range(len(loads)))
        v = RouteView(text=text, workers=fleet(tuple(loads), tuple(healthy), urls), draw=draw, routing_key=key)
        check_decision(v, policy.route(v))
        with pytest.raises(NoHealthyWorker):
            policy.route(RouteView(text=text, workers=fleet(tuple(loads), (False,) * len(loads), urls)))


def test_check_decision_rejects_unhealthy_and_missing_workers():
    v = view(healthy=(True, False, True))
    from policies.router import RouteDecision
    with pytest.raises(ValueError):
        check_decision(v, RouteDecision(1))
    with pytest.raises(ValueError):
        check_decision(v, RouteDecision(3))
