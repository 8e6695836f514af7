"""Penelope (``+cache=penelope``): the pure order, the simulator cache's gaps
(hollow nodes) and host tier, and the engine recomputing only the gap."""

from __future__ import annotations

from array import array
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.config import compose_bench, resolve_bench
from bench.sim import CostModel, build_simulator
from bench.sim.cache import Node, PrefixCache
from bench.sim.host_tier import HostTier
from bench.sim.request import FINAL, Phase
from policies.cache import BlockView, EvictionPolicy
from policies.cache.lfu import LfuPolicy
from policies.cache.lru import LruPolicy
from policies.cache.penelope import PenelopePolicy
from tests.sim.helpers import LinearCost, req, settings as sim_settings, trace_of
from tests.sim.test_sim_invariants import workloads


def view(i: int, prefix: int, last: float, *, tokens: int = 4, children: int = 1,
         sessions: int = 1) -> BlockView:
    return BlockView(block_id=i, num_tokens=tokens, prefix_len=prefix, last_access=last,
                     created=0.0, num_children=children, num_sessions=sessions)


def blocks(*ids: int) -> array:
    return array("q", ids)


# ------------------------------------------------------------------ the pure policy
def test_penelope_is_an_eviction_policy_that_hollows():
    p = PenelopePolicy()
    assert isinstance(p, EvictionPolicy) and p.needs.interior
    assert not LruPolicy().needs.interior and not LfuPolicy().needs.interior


def test_front_of_one_history_goes_first_and_shared_prefix_last():
    p = PenelopePolicy(system_prompt_tokens=8)
    system = view(0, 0, 5.0)                     # within the system prompt
    branch = view(1, 8, 5.0, children=2)         # a branch point (two continuations)
    multi = view(2, 8, 1.0, sessions=2)          # two sessions went through it
    front, middle, tail = view(3, 8, 5.0), view(4, 12, 5.0), view(5, 16, 5.0, children=0)
    order = sorted([tail, system, middle, branch, front, multi], key=p.rank)
    assert order[:3] == [front, middle, tail]
    assert set(order[3:]) == {system, branch, multi}
    assert order[3] is multi  # least recently used shared block first


def test_across_histories_least_recently_used_first():
    p = PenelopePolicy()
    old_tail = view(1, 1000, 1.0, children=0)
    new_front = view(2, 10, 2.0)
    assert sorted([new_front, old_tail], key=p.rank) == [old_tail, new_front]


def test_shared_prefix_goes_tail_first():
    p = PenelopePolicy(system_prompt_tokens=100)
    a, b = view(1, 0, 1.0), view(2, 50, 1.0)
    assert sorted([a, b], key=p.rank) == [b, a]


def test_position_weight_lets_a_recent_front_go_before_an_older_tail():
    old_tail = view(1, 10_000, 1.0, children=0)
    new_front = view(2, 10, 2.0)
    p = PenelopePolicy(position_weight_s=0.001)  # 10k tokens earn 10 s of recency
    assert sorted([old_tail, new_front], key=p.rank) == [new_front, old_tail]


# ------------------------------------------------------------ the cache with gaps
def chain_cache(policy=None, host=None) -> tuple[PrefixCache, Node, Node, Node]:
    """System prompt [1] shared by two sessions, then session A's turns [2], [3]."""
    c = PrefixCache(4, policy or PenelopePolicy(system_prompt_tokens=4), host=host)
    c.insert(blocks(1, 2), 8, now=0.0, session="A")
    c.insert(blocks(1, 9), 8, now=0.5, session="B")
    c.insert(blocks(1, 2, 3), 12, now=1.0, session="A")
    _, n3 = c.match(blocks(1, 2, 3), now=1.0, touch=False)
    n2 = n3.parent
    assert n2 is not None and n2.parent is not None
    return c, n2.parent, n2, n3


def test_penelope_hollows_the_front_of_a_history_and_keeps_its_tail():
    c, system, front, tail = chain_cache()
    assert c.view(system).num_sessions == 2
    assert c.evict(4) == 4  # B's [9] is older (0.5) than A's path (1.0): it goes first
    assert c.match(blocks(1, 9), now=2.0, touch=False)[0] == 1
    assert c.evict(4) == 4
    assert front.hollow and not tail.hollow and not system.hollow
    assert c.tree_tokens == 8 and c.hollow_tokens(tail) == 4
    k, node = c.match(blocks(1, 2, 3, 7), now=3.0)
    assert (k, node) == (3, tail)  # keys stay: the match runs through the gap
    c.check()
    c.lock(tail)
    gaps, restored = c.fill_path(tail)
    assert gaps == [(4, 4)] and restored == 0 and not front.hollow and c.tree_tokens == 12
    c.unlock(tail)
    c.check()


def test_lru_stays_tail_first_and_never_hollows():
    c, system, front, tail = chain_cache(policy=LruPolicy())
    c.evict(8)
    assert not any(n.hollow for n in c.nodes())
    assert c.match(blocks(1, 2, 3), now=9.0, touch=False)[0] == 2  # [3] went, [2] stayed


def test_a_hollow_history_whose_tail_goes_is_removed_whole():
    c, system, front, tail = chain_cache()
    c.evict(8)  # B's [9], then A's front [2]
    assert front.hollow
    c.evict(4)  # A's tail: nothing useful is left of A's path
    assert not front.attached and not tail.attached and system.attached
    assert c.match(blocks(1, 2, 3), now=9.0, touch=False)[0] == 1
    c.check()


def test_host_tier_keeps_freed_leaves_restorable_and_drops_the_oldest():
    host = HostTier(capacity=8, bandwidth_gbs=1.0)
    c, system, front, tail = chain_cache(policy=LruPolicy(), host=host)
    c.evict(4)  # B's [9] -> host
    c.evict(4)  # A's [3] (leaf) -> host
    assert host.used == 8 and tail.hollow and tail.on_host
    c.evict(4)  # A's [2] (now a leaf of KV) -> host; B's [9] is dropped and removed
    assert host.used == 8 and front.on_host
    assert c.match(blocks(1, 9), now=9.0, touch=False)[0] == 1
    c.check()
    c.lock(tail)
    gaps, restored = c.fill_path(tail)
    assert gaps == [] and restored == 8 and host.used == 0 and c.tree_tokens == 12
    c.unlock(tail)
    c.check()


@st.composite
def cache_ops(draw):
    """Random inserts (chained paths), matches, locks/unlocks, evictions."""
    ops = []
    paths: list[list[int]] = [[]]
    fresh = 100
    for _ in range(draw(st.integers(1, 40))):
        kind = draw(st.sampled_from(["insert", "insert", "lock", "unlock", "evict", "fill"]))
        if kind == "insert":
            base = draw(st.sampled_from(paths))
            keep = draw(st.integers(0, len(base)))
            extra = draw(st.integers(1, 3))
            path = base[:keep] + list(range(fresh, fresh + extra))
            fresh += extra
            paths.append(path)
            ops.append(("insert", path, draw(st.sampled_from(["A", "B", "C"]))))
        elif kind == "evict":
            ops.append(("evict", draw(st.integers(1, 40))))
        else:
            ops.append((kind, draw(st.integers(0, 10**6))))
    return ops


POLICIES = [PenelopePolicy(), PenelopePolicy(system_prompt_tokens=8), LruPolicy(), LfuPolicy()]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=cache_ops(), policy=st.sampled_from(POLICIES), host=st.sampled_from([0, 8, 24]),
       capacity=st.integers(8, 60))
def test_cache_invariants_with_gaps(ops, policy, host, capacity):
    """Under any sequence: KV use stays within the pool; every cached block has
    exactly one node; hollow nodes own no KV; locked nodes are never freed; a
    match never hands out KV that is gone or that a locked request holds
    privately (a request's gap refill is its own and fills only its path)."""
    bs = 4
    c = PrefixCache(bs, policy, host=HostTier(host, 10.0) if host else None)
    locked: list[Node] = []
    for t, op in enumerate(ops):
        if op[0] == "insert":
            path = op[1]
            need = len(path) * bs  # at most this much new KV (new leaf + refilled gaps)
            short = c.tree_tokens + need - capacity
            if short > 0:
                c.evict(short)
            if c.tree_tokens + need > capacity:
                continue  # locked paths leave too little room
            c.insert(array("q", path), len(path) * bs, now=float(t), session=op[2])
        elif op[0] == "lock" and c.num_nodes:
            nodes = list(c.nodes())
            n = nodes[op[1] % len(nodes)]
            need = c.hollow_tokens(n)
            c.lock(n)
            short = c.tree_tokens + need - capacity
            if short > 0:
                c.evict(short)
            if c.tree_tokens + need > capacity:
                c.unlock(n)
                continue
            gaps, restored = c.fill_path(n)  # the request refills its gaps at admission
            assert sum(tok for tok, _ in gaps) + restored == need
            locked.append(n)
        elif op[0] == "unlock" and locked:
            c.unlock(locked.pop(op[1] % len(locked)))
        elif op[0] == "evict":
            c.evict(op[1])
        c.check()  # NOTE: token sums exact: hollow nodes own no KV, host copies all hollow
        assert c.tree_tokens <= capacity
        for n in locked:  # a request's locked path keeps its KV: never hollowed nor removed
            assert all(m.attached and not m.hollow for m in c.path(n))
        owners: Counter[int] = Counter()
        for n in c.nodes():  # every cached block has exactly one node
            owners.update(n.blocks)
            assert (n.kv_tokens == 0) == n.hollow
        assert all(v == 1 for v in owners.values())
        # a match hands out only KV the tree holds: its reusable tokens are the
        # non-hollow nodes of its path, never more than the tree holds
        for n in locked:
            reuse = sum(m.kv_tokens for m in c.path(n))
            assert reuse + c.hollow_tokens(n) == sum(m.num_tokens for m in c.path(n))
            assert reuse <= c.tree_tokens
    for n in locked:
        c.unlock(n)
    c.check()
    assert c.evictable_tokens == c.tree_tokens


# ----------------------------------------------------------------- the simulator
class GapCost(LinearCost):
    """LinearCost that also takes the engine's gap work."""

    def prefill_time(self, extends, gaps=(), extra_s: float = 0.0) -> float:
        return super().prefill_time(list(extends) + list(gaps)) + extra_s


def agent_trace():
    """Session A grows its history over four turns: [0, 1] (its system prompt),
    then [2, 3], [4, 5], [6, 7]; session B (blocks of its own) arrives while A
    thinks before its last turn and needs 8 of A's cached tokens."""
    a = [req("a1", 0.0, 8, 1, [0, 1], session_id="A")]
    for i, n in ((2, 4), (3, 6), (4, 8)):
        a.append(req(f"a{i}", 0.0, 4 * n, 1, list(range(n)), session_id="A", after=f"a{i - 1}",
                     delay_s=10.0 if i == 4 else 0.0))
    b1 = req("b1", 5.0, 24, 1, list(range(20, 26)), session_id="B")
    return trace_of([*a, b1], block_size=4)


@pytest.mark.parametrize("policy, gap, cached4", [
    (PenelopePolicy(system_prompt_tokens=8), 8, 16),  # A's middle [2, 3] hollowed: prefix + tail kept
    (LruPolicy(), 0, 16),                               # A's tail [4, 5] evicted
])
def test_a_middle_segment_is_hollowed_and_only_the_gap_recomputed(policy, gap, cached4):
    sim = build_simulator(agent_trace(), GapCost(),
                          sim_settings(capacity=40, max_running_requests=1), eviction=policy)
    sim.on_sample = lambda s: s.check()
    sim.run()
    r = sim.requests
    assert all(x.phase is Phase.FINISHED for x in r.values())
    assert sim.gap_recomputed_tokens == gap
    a4 = r["a4"]
    assert a4.cached_first == cached4
    assert a4.prefill_tokens == 32 - cached4  # the gap (if any) plus the new blocks
    assert sim.evicted_recomputed_tokens == 8  # either way 8 tokens A had cached came back
    assert sim.cache.num_evicted_tokens >= 8
    sim.check()


@pytest.fixture(scope="module")
def cost() -> CostModel:
    s = resolve_bench(compose_bench(["accelerator=cpu", "model_profile=smollm2-135m"]))
    return CostModel(s.accelerator, s.model_profile)


def test_gap_tokens_are_charged_at_their_positions(cost):
    """Recomputing a front gap costs less than the same tokens at the end."""
    front = cost.prefill_time([(100, 5000)], gaps=[(1000, 100)])
    tail = cost.prefill_time([(1100, 4000)])
    assert front < tail
    assert cost.prefill_time([(100, 5000)], gaps=()) == cost.prefill_time([(100, 5000)])


@st.composite
def agent_workloads(draw):
    """Agent sessions: each turn resends the previous turn's prompt plus new blocks
    (closed-loop), a few sessions sharing a system prompt, so a small pool hollows."""
    bs = 4
    fresh, out = 100, []
    system = list(range(draw(st.integers(0, 2))))
    for s in range(draw(st.integers(1, 4))):
        path = list(system)
        prev = None
        for t in range(draw(st.integers(1, 6))):
            extra = draw(st.integers(1, 4))
            path = path + list(range(fresh, fresh + extra))
            fresh += extra
            rid = f"s{s}t{t}"
            kw = dict(after=prev, delay_s=draw(st.floats(0, 2))) if prev else {}
            out.append(req(rid, draw(st.floats(0, 3)), len(path) * bs + draw(st.integers(0, bs - 1)),
                           draw(st.integers(1, 12)), list(path), session_id=f"s{s}", **kw))
            prev = rid
    return trace_of(out, block_size=bs, span=fresh)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=st.one_of(workloads(), agent_workloads()), capacity=st.integers(24, 600),
       chunk=st.sampled_from([None, 8, 32, 100]),
       slots=st.integers(1, 8), policy=st.sampled_from(POLICIES[:2]),
       host=st.sampled_from([0, 16, 200]))
def test_simulator_invariants_with_penelope(cost, trace, capacity, chunk, slots, policy, host):
    """The engine's pool and lock invariants hold every iteration with gaps and a host tier."""
    sim = build_simulator(trace, cost, sim_settings(capacity=capacity, chunked_prefill_size=chunk,
                                                    max_running_requests=slots, context_length=4096,
                                                    host_tier_tokens=host),
                          eviction=policy)
    finals: Counter[str] = Counter()
    sim.on_final = lambda r: finals.update([r.rid])
    sim.on_sample = lambda s: s.check()
    sim.run()
    assert all(finals[rid] == 1 for rid in sim.requests)
    assert all(r.phase in FINAL for r in sim.requests.values())
    sim.check()
    assert sim.private_tokens == 0 and not sim.running and sim.chunked is None
    assert sim.cache.evictable_tokens == sim.cache.tree_tokens
    for r in sim.requests.values():
        if r.phase is Phase.FINISHED:
            assert r.num_output == r.output_len and r.cached_first is not None
            assert r.prefill_tokens >= r.input_len - r.cached_first
