"""The simulator's routing binding (``bench/sim/cluster.py``): known answers and invariants.

Cost model as in ``test_sim_known_answers`` (prefill 10 ms + 1 ms/token,
decode 20 ms). Sessions here are closed-loop: turn ``k + 1`` is released
``delay`` after turn ``k`` finished, and its prompt extends turn ``k``'s.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.config import compose_bench, resolve_bench
from bench.run import run_bench
from bench.schema import RoutingKey
from bench.sim import SimParts, build_simulator, records_of
from bench.sim.cluster import Cluster
from bench.sim.moves import moved_sessions, replay_routes
from bench.sim.routing import CHARS_PER_TOKEN, replica_url, routing_text
from bench.traces.paths import default_data_root
from policies.router import RouteDecision, RouteView
from policies.router.cache_aware import CacheAwarePolicy
from policies.router.consistent_hashing import ConsistentHashingPolicy
from policies.router.least_load import LeastLoadPolicy
from policies.router.power_of_two import PowerOfTwoPolicy
from policies.router.prefix_hash import PrefixHashPolicy
from policies.router.random import RandomPolicy
from policies.router.round_robin import RoundRobinPolicy
from policies.scheduling.lpm import LpmPolicy
from tests.data import needs_data
from tests.sim.helpers import LinearCost, chain, req, trace_of
from tests.sim.helpers import settings as sim_settings

BS = 16
ROUTERS = (RoundRobinPolicy, RandomPolicy, LeastLoadPolicy, PowerOfTwoPolicy, ConsistentHashingPolicy,
           PrefixHashPolicy, CacheAwarePolicy)


def sessions(n: int, turns: int, gap: float = 1.0, first_blocks: int = 20, seed: int = 0, delay: float = 0.5):
    """``n`` sessions of ``turns`` turns; a session's first prompt is ``first_blocks``
    fresh blocks (320 tokens: past prefix_hash's 256), each turn adds 2 more."""
    rng = random.Random(seed)
    out = []
    for s in range(n):
        blocks: list[int] = []
        prev = None
        for t in range(turns):
            blocks = chain(blocks, first_blocks if t == 0 else 2, 10_000 * s + 100 * t)
            rid = f"s{s}t{t}"
            out.append(req(rid, s * gap if t == 0 else 1e6, BS * len(blocks) + rng.randint(0, 5),
                           rng.randint(1, 4), blocks, session_id=f"s{s}", after=prev, delay_s=delay if prev else 0.0))
            prev = rid
    return trace_of(out, block_size=BS)


def cluster(trace, router, n, key=RoutingKey.none, seed=0, **kw):
    sims = [build_simulator(trace, LinearCost(), sim_settings(**kw)) for _ in range(n)]
    c = Cluster(trace, sims, router, seed=seed, key=key)
    c.run()
    return c


def by_session(c: Cluster) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for _, tr, _ in c.routed:
        out.setdefault(tr.session_id, set()).add(c.assignment[tr.rid])
    return out


@pytest.mark.parametrize("router", [RoundRobinPolicy, RandomPolicy, CacheAwarePolicy, PrefixHashPolicy])
def test_one_replica_is_the_lone_simulator_bit_for_bit(router):
    trace = sessions(6, 4, gap=0.05)
    alone = build_simulator(trace, LinearCost(), sim_settings(), SimParts(order=LpmPolicy()))
    alone.run()
    replica = build_simulator(trace, LinearCost(), sim_settings(), SimParts(order=LpmPolicy()))
    c = Cluster(trace, [replica], router())
    c.run()
    assert records_of(replica) == records_of(alone)
    assert replica.num_iterations == alone.num_iterations and replica.now == alone.now


def test_routing_text_shares_characters_exactly_as_blocks():
    trace = sessions(2, 2)
    a, b = (routing_text(r, BS) for r in trace.requests if r.session_id == "s0")
    other = routing_text(next(r for r in trace.requests if r.session_id == "s1"), BS)
    ra = next(r for r in trace.requests if r.rid == "s0t0")
    assert len(a) == CHARS_PER_TOKEN * ra.input_tokens
    assert b.startswith(a[:CHARS_PER_TOKEN * BS * 20])  # turn 1 extends turn 0's 20 blocks
    assert b[CHARS_PER_TOKEN * BS * 20:CHARS_PER_TOKEN * BS * 21] != a[CHARS_PER_TOKEN * BS * 20:][:64]
    assert a[:64] != other[:64]
    assert routing_text(ra, BS) == a  # deterministic


@pytest.mark.parametrize("router", [PrefixHashPolicy, CacheAwarePolicy])
def test_prefix_routers_keep_every_turn_of_a_session_on_one_replica_under_low_load(router):
    c = cluster(sessions(12, 5, gap=2.0), router(), 4)
    assert all(len(r) == 1 for r in by_session(c).values())
    assert len({next(iter(r)) for r in by_session(c).values()}) > 1  # sessions spread over replicas


def test_consistent_hashing_on_the_session_key_pins_sessions():
    c = cluster(sessions(12, 4, gap=0.01), ConsistentHashingPolicy(), 3, key=RoutingKey.session)
    assert all(len(r) == 1 for r in by_session(c).values()) and c.branches == {"ring": 48}
    loose = cluster(sessions(12, 4, gap=0.01), ConsistentHashingPolicy(), 3)
    assert any(len(r) > 1 for r in by_session(loose).values())  # no key: random


def test_round_robin_spreads_evenly():
    c = cluster(sessions(10, 3, gap=0.01), RoundRobinPolicy(), 4)
    counts = Counter(c.assignment.values())
    assert max(counts.values()) - min(counts.values()) <= 1 and sum(counts.values()) == 30


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(ROUTERS), st.integers(1, 5), st.integers(0, 10_000), st.floats(0.0, 1.0))
def test_no_request_is_lost_and_the_gateway_counts_in_flight_causally(router, n, seed, gap):
    trace = sessions(8, 3, gap=gap, seed=seed, first_blocks=3, delay=0.01)
    seen: list[tuple[int, ...]] = []
    inner = router()

    class Spy:
        needs = inner.needs

        def route(self, view: RouteView) -> RouteDecision:
            seen.append(tuple(w.in_flight for w in view.workers))
            return inner.route(view)

    c = cluster(trace, Spy(), n, seed=seed, key=RoutingKey.session)
    records = c.merged([records_of(s) for s in c.replicas])
    assert sorted(r.rid for r in records) == sorted(r.rid for r in trace.requests)
    assert all(r.status == "finished" for r in records) and c.in_flight == [0] * n
    assert [r.arrival_s for r in records] == sorted(r.arrival_s for r in records)
    for s in c.replicas:
        s.check()
    # the view at each call counts exactly the requests routed before it and not final by its time
    for k, (at, _, _) in enumerate(c.routed):
        expect = [0] * n
        for _, tr2, _ in c.routed[:k]:
            if c.finished_at[tr2.rid] > at:
                expect[c.assignment[tr2.rid]] += 1
        assert seen[k] == tuple(expect)
    # the replay of the same calls makes the run's decisions
    urls = tuple(replica_url(i) for i in range(n))
    again = replay_routes(router, c.routed, c.finished_at, BS, RoutingKey.session, urls, urls, 0.0)
    assert again == {rid: urls[i] for rid, i in c.assignment.items()}


def test_adding_a_replica_moves_consistent_hashing_sessions_only_to_it():
    trace = sessions(60, 4, gap=0.2)
    c = cluster(trace, ConsistentHashingPolicy(), 4, key=RoutingKey.session)
    urls4 = tuple(replica_url(i) for i in range(4))
    urls5 = urls4 + (replica_url(4),)
    mid = c.routed[len(c.routed) // 2][0]
    base = replay_routes(ConsistentHashingPolicy, c.routed, c.finished_at, BS, RoutingKey.session, urls4, urls4, mid)
    grown = replay_routes(ConsistentHashingPolicy, c.routed, c.finished_at, BS, RoutingKey.session, urls4, urls5,
                          mid)
    moved, live = moved_sessions(c.routed, base, grown, mid)
    assert live > 10 and 0 < moved < live
    assert all(grown[rid] == urls5[-1] for rid in base if base[rid] != grown[rid])
    # round robin re-deals almost everything
    rr_base = replay_routes(RoundRobinPolicy, c.routed, c.finished_at, BS, RoutingKey.none, urls4, urls4, mid)
    rr_grown = replay_routes(RoundRobinPolicy, c.routed, c.finished_at, BS, RoutingKey.none, urls4, urls5, mid)
    assert moved_sessions(c.routed, rr_base, rr_grown, mid)[0] > moved


MOONCAKE = default_data_root() / "mooncake" / "conversation_trace.jsonl"


@needs_data(MOONCAKE)
def test_bench_with_one_replica_behind_a_router_equals_the_plain_run():
    common = ["trace=mooncake_conversation", "trace.window_end_s=40", "trace.mooncake.sessions=true",
              "output.progress=false"]
    plain = run_bench(resolve_bench(compose_bench(common)))
    routed = run_bench(resolve_bench(compose_bench([*common, "+router=cache_aware"])))
    assert routed["summary"] == plain["summary"]
    assert routed["meta"]["per_replica"][0]["requests"] == plain["summary"]["requests"]
    two = run_bench(resolve_bench(compose_bench([*common, "+router=cache_aware", "sim.replicas=2"])))
    assert two["summary"]["requests"] == plain["summary"]["requests"]
    assert sum(r["requests"] for r in two["meta"]["per_replica"]) == plain["summary"]["requests"]
