"""Invariants of the simulator over random workloads, pools and policies (hypothesis).

For every generated scenario, after every iteration: KV use never exceeds the
pool, the prefix cache's token and lock bookkeeping is exact, and an evicted
block is never locked. At the end: every request reached exactly one final
state, finished requests produced all their tokens, all KV is released, and
no request got its first token sooner than its own prefill alone would take.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.config import compose_bench, resolve_bench
from bench.sim import CostModel, SimParts, build_simulator
from bench.sim.request import FINAL, Phase
from policies.admission.max_queue import MaxQueuePolicy
from policies.cache.fifo import FifoPolicy
from policies.cache.filo import FiloPolicy
from policies.cache.lfu import LfuPolicy
from policies.cache.lru import LruPolicy
from policies.cache.mru import MruPolicy
from policies.cache.priority import PriorityPolicy
from policies.cache.slru import SlruPolicy
from policies.scheduling.dfs_weight import DfsWeightPolicy
from policies.scheduling.fcfs import FcfsPolicy
from policies.scheduling.hrrn import HrrnPolicy
from policies.scheduling.lof import LofPolicy
from policies.scheduling.lpm import LpmPolicy
from policies.scheduling.shortest_prefill import ShortestPrefillPolicy
from policies.scheduling.shortest_prefill_first import ShortestPrefillFirstPolicy
from tests.sim.helpers import parts_of, req, trace_of
from tests.sim.helpers import settings as sim_settings

ORDERS = [None, FcfsPolicy(), LpmPolicy(), HrrnPolicy(), ShortestPrefillFirstPolicy(),
          ShortestPrefillPolicy(), DfsWeightPolicy(), LofPolicy()]
EVICTIONS = [None, LruPolicy(), LfuPolicy(), FifoPolicy(), MruPolicy(), FiloPolicy(), PriorityPolicy(),
             SlruPolicy()]


@pytest.fixture(scope="module")
def cost() -> CostModel:
    s = resolve_bench(compose_bench(["accelerator=cpu", "model_profile=smollm2-135m"]))
    return CostModel(s.accelerator, s.model_profile)


@st.composite
def workloads(draw):
    """Requests sharing chained prefixes (a random prefix forest), some closed-loop."""
    bs = draw(st.sampled_from([4, 16]))
    paths: list[list[int]] = [[]]
    fresh = 0
    out = []
    n = draw(st.integers(1, 24))
    times = sorted(draw(st.lists(st.floats(0, 3), min_size=n, max_size=n)))
    for i, t in enumerate(times):
        base = draw(st.sampled_from(paths))
        keep = draw(st.integers(0, len(base)))
        extra = draw(st.integers(0, 4))
        blocks = base[:keep] + list(range(fresh, fresh + extra))
        fresh += extra
        if blocks:
            paths.append(blocks)
        n_in = len(blocks) * bs + draw(st.integers(0 if blocks else 1, bs - 1))  # unhashed tail
        follow = i > 0 and draw(st.booleans()) and draw(st.booleans())
        kw = dict(after=f"r{i - 1}", delay_s=draw(st.floats(0, 0.5))) if follow else {}
        out.append(req(f"r{i}", t, n_in, draw(st.integers(1, 80)), blocks or None,
                       session_id="s" if follow else None, **kw))
    return trace_of(out, block_size=bs, span=fresh)


def replay_checked(sim, trace, cost) -> None:
    """Run ``sim`` checking the invariants each iteration and at the end."""
    finals: Counter[str] = Counter()
    sim.on_final = lambda r: finals.update([r.rid])
    forward = sim.cache.on_evict

    def on_evict(node):
        assert node.lock_ref == 0, "a locked block was evicted"
        forward(node)

    sim.cache.on_evict = on_evict
    first_gaps: dict[str, list[tuple[int, int]]] = {}
    fill_gaps = sim._fill_gaps

    def record_gaps(r):
        recomputed = fill_gaps(r)
        first_gaps.setdefault(r.rid, list(sim._gaps.get(r, ((), 0))[0]))
        return recomputed

    sim._fill_gaps = record_gaps
    sim.on_sample = lambda s: s.check()
    sim.run()

    # every request of the trace reached exactly one final state
    assert set(sim.requests) == {r.rid for r in trace.requests}
    assert all(finals[rid] == 1 for rid in sim.requests), finals
    assert all(r.phase in FINAL for r in sim.requests.values())
    # everything released
    sim.check()
    assert sim.private_tokens == 0 and not sim.running and sim.chunked is None
    assert sim.cache.evictable_tokens == sim.cache.tree_tokens
    for r in sim.requests.values():
        if r.phase is Phase.FINISHED:
            assert r.num_output == r.output_len
            assert r.first_token_s <= r.finish_s
            # NOTE: the request's own prefill, alone, from what it found cached; a
            # hollowed gap it refilled is charged at the gap's (earlier) positions
            gaps = first_gaps.get(r.rid, [])
            done = r.cached_first + sum(t for t, _ in gaps)
            own = cost.prefill_time([(r.input_len - done, done)], gaps) if gaps \
                else cost.prefill_time([(r.input_len - r.cached_first, r.cached_first)])
            assert r.first_token_s - r.arrival_s >= own - 1e-12
            assert sum(1 + end - start for _, start, end in r.segments) == r.num_output
        elif r.phase is Phase.REJECTED:
            assert r.first_token_s is None


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=workloads(), capacity=st.integers(24, 600), chunk=st.sampled_from([None, 8, 32, 100]),
       slots=st.integers(1, 8), ignore_eos=st.booleans(),
       order=st.sampled_from(ORDERS), eviction=st.sampled_from(EVICTIONS),
       max_waiting=st.sampled_from([None, 1, 4]), prefill_max=st.sampled_from([None, 1, 3]))
def test_invariants_hold_for_any_workload(cost, trace, capacity, chunk, slots, ignore_eos, order,
                                          eviction, max_waiting, prefill_max):
    sim = build_simulator(
        trace, cost,
        sim_settings(capacity=capacity, chunked_prefill_size=chunk, max_running_requests=slots,
                     ignore_eos=ignore_eos, prefill_max_requests=prefill_max, context_length=4096),
        parts_of(order, eviction, MaxQueuePolicy(max_waiting=max_waiting) if max_waiting else None))
    replay_checked(sim, trace, cost)


@st.composite
def pressure(draw):
    """Staggered requests with long outputs: admission underestimates decode growth."""
    n = draw(st.integers(4, 14))
    gaps = draw(st.lists(st.floats(0.02, 0.3), min_size=n, max_size=n))
    shared = draw(st.booleans())
    out, t = [], 0.0
    for i, gap in enumerate(gaps):
        t += gap
        blocks = ([0, 1] if shared else []) + [2 + 2 * i, 3 + 2 * i]
        out.append(req(f"r{i}", t, 8 * len(blocks), draw(st.integers(30, 120)), blocks))
    return trace_of(out, block_size=8)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=pressure(), capacity=st.integers(150, 500), order=st.sampled_from(ORDERS),
       eviction=st.sampled_from(EVICTIONS), chunk=st.sampled_from([None, 16]))
def test_invariants_hold_under_decode_memory_pressure(cost, trace, capacity, order, eviction, chunk):
    sim = build_simulator(trace, cost, sim_settings(capacity=capacity, ignore_eos=False,
                                                    chunked_prefill_size=chunk, context_length=4096),
                          SimParts(order=order, eviction=eviction))
    replay_checked(sim, trace, cost)


def test_a_tight_pool_retracts_and_recomputes(cost):
    """With outputs underestimated (no ignore_eos) a small pool must retract; the
    retracted requests come back, recompute their prompt plus output, and finish."""
    trace = trace_of([req(f"r{i}", 0.1 * i, 20, 100) for i in range(8)])
    sim = build_simulator(trace, cost, sim_settings(capacity=400, ignore_eos=False))
    sim.on_sample = lambda s: s.check()
    sim.run()
    assert sim.num_retractions > 0
    retracted = [r for r in sim.requests.values() if r.retractions]
    assert retracted and all(r.phase is Phase.FINISHED for r in sim.requests.values())
    assert all(r.prefill_tokens > r.input_len for r in retracted)  # prompt + output again
