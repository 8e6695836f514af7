"""Penelope (``+cache=penelope``): the pure order, the simulator cache's gap
refill (``fill_path``) and the engine recomputing only the gap."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.config import compose_bench, resolve_bench
from bench.sim import CostModel, SimParts, build_simulator
from bench.sim.cache import PrefixCache
from bench.sim.request import Phase
from policies.cache import BlockView, EvictionPolicy
from policies.cache.lfu import LfuPolicy
from policies.cache.lru import LruPolicy
from policies.cache.penelope import PenelopePolicy
from tests.fakes import EvictBlocksAt
from tests.sim.helpers import LinearCost, req, trace_of
from tests.sim.helpers import settings as sim_settings
from tests.sim.test_sim_invariants import replay_checked, workloads


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
# (the tree's gaps and host tier: tests/policies/test_gap_tree.py)
def test_fill_path_merges_adjacent_gaps_and_counts_host_copies_as_restored():
    """One history [1] .. [6], one block per turn (4 tokens a block): [2], [3] and
    [5] freed; with a host tier that holds 4 tokens, [5]'s copy is kept."""
    for host, gaps, restored in ((0, [(8, 4), (4, 16)], 0), (4, [(8, 4)], 4)):
        c = PrefixCache(4, EvictBlocksAt(4, 8, 16), host_tier_tokens=host, host_bandwidth_gbs=10.0)
        for n in range(1, 7):
            c.insert(blocks(*range(1, n + 1)), 4 * n, now=float(n), session="A")
        assert c.evict(12) == 12  # [2], [3], [5] in turn; a tier of 4 tokens keeps the last copy
        _, node = c.match(blocks(1, 2, 3, 4, 5, 6), now=9.0, touch=False)
        assert c.hollow_tokens(node) == 12 and c.may_have_gaps
        c.lock(node)
        assert c.fill_path(node) == (gaps, restored)
        assert c.hollow_tokens(node) == 0 and c.tree_tokens == 24
        c.unlock(node)
        c.check()
        assert c.restore_s(4, 1e9) == pytest.approx(0.4)  # 4 GB at 10 GB/s


# ----------------------------------------------------------------- the simulator
POLICIES = [PenelopePolicy(), PenelopePolicy(system_prompt_tokens=8)]


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
                          sim_settings(capacity=40, max_running_requests=1), SimParts(eviction=policy))
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
       slots=st.integers(1, 8), policy=st.sampled_from(POLICIES),
       host=st.sampled_from([0, 16, 200]))
def test_simulator_invariants_with_penelope(cost, trace, capacity, chunk, slots, policy, host):
    """The engine's pool and lock invariants hold every iteration with gaps and a host tier."""
    sim = build_simulator(trace, cost, sim_settings(capacity=capacity, chunked_prefill_size=chunk,
                                                    max_running_requests=slots, context_length=4096,
                                                    host_tier_tokens=host),
                          SimParts(eviction=policy))
    replay_checked(sim, trace, cost)  # every iteration and at the end, as without gaps
    for r in sim.requests.values():
        if r.phase is Phase.FINISHED:
            assert r.cached_first is not None
            assert r.prefill_tokens >= r.input_len - r.cached_first
