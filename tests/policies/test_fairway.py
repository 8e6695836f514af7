"""Fairway on hand-built views: cheap-first, aging, the cap, starvation-freedom."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.scheduling import QueueView, check_permutation
from policies.scheduling.fairway import FairwayPolicy
from policies.scheduling.shortest_prefill import ShortestPrefillPolicy
from policies.views import RequestView


def req(rid: str, seq: int, work: int, cached: int = 0, arrived_at_clock: int = 0) -> RequestView:
    return RequestView(rid=rid, arrival_seq=seq, arrival_time=float(seq), num_input_tokens=work + cached,
                       num_cached_tokens=cached, arrival_processed_tokens=arrived_at_clock)


def test_short_queue_is_cheap_first():
    policy = FairwayPolicy(queue_threshold=8)
    queue = QueueView((req("big", 0, 900), req("hit", 1, 12, cached=4000), req("mid", 2, 200)))
    assert policy.order(queue).order == ("hit", "mid", "big")


def test_aging_is_relative_to_own_prefill():
    policy = FairwayPolicy(queue_threshold=8, aging_weight=1.0)
    # long: 1000 work, waited 3000 tokens -> 1000/4 = 250; fresh mid: 300 -> 300
    queue = QueueView((req("long", 0, 1000, arrived_at_clock=0), req("mid", 1, 300, arrived_at_clock=3000)),
                      processed_tokens=3000)
    assert policy.order(queue).order == ("long", "mid")
    # the same wait barely moves a request of 10k tokens: 10000/1.3 > 300
    queue = QueueView((req("huge", 0, 10_000, arrived_at_clock=0), req("mid", 1, 300, arrived_at_clock=3000)),
                      processed_tokens=3000)
    assert policy.order(queue).order == ("mid", "huge")


def test_cap_stops_cheap_requests_passing_the_oldest():
    policy = FairwayPolicy(queue_threshold=0, cap_ratio=0.1, cap_floor_tokens=0)  # allowance(A)=40
    queue = QueueView((req("A", 0, 400), req("B", 1, 20), req("C", 2, 20), req("D", 3, 20)))
    assert policy.order(queue).order == ("B", "C", "A", "D")
    # B and C were served (clock +40): A's added delay used its allowance, so it is next
    queue = QueueView((req("A", 0, 400), req("D", 3, 20), req("E", 4, 20, arrived_at_clock=40)),
                      processed_tokens=40)
    assert policy.order(queue).order[0] == "A"


def test_fcfs_backlog_is_not_added_delay():
    policy = FairwayPolicy(queue_threshold=0, cap_ratio=0.1, cap_floor_tokens=0)
    # X is older than A: A's wait while X is served is what FCFS gives A anyway.
    first = QueueView((req("X", 0, 1000), req("A", 1, 400), req("B", 2, 20)))
    policy.order(first)
    after_x = QueueView((req("A", 1, 400), req("B", 2, 20), req("C", 3, 20, arrived_at_clock=1000)),
                        processed_tokens=1000)
    assert policy.added_delay(after_x.requests[0], 1000) == 0
    # B (20) and C (20) fit A's 40-token allowance; had X's 1000 tokens counted as
    # added delay, A would have gone first.
    assert policy.order(after_x).order == ("B", "C", "A")


def serve_stream(policy, steps: int, cheap_work: int = 10, big_work: int = 500):
    """Each step one cheap request arrives and the host serves the first in order."""
    waiting = [req("big", 0, big_work)]
    clock, seq = 0, 1
    for _ in range(steps):
        waiting.append(req(f"c{seq}", seq, cheap_work, arrived_at_clock=clock))
        seq += 1
        first = policy.order(QueueView(tuple(waiting), processed_tokens=clock)).order[0]
        chosen = next(r for r in waiting if r.rid == first)
        waiting.remove(chosen)
        if chosen.rid == "big":
            return clock  # tokens processed before big started (all added delay)
        clock += chosen.num_uncached_tokens
    return None


def test_oldest_wait_stays_bounded_under_a_stream_of_cheap_requests():
    fairway = FairwayPolicy(queue_threshold=0, aging_weight=0.0, cap_ratio=1.0, cap_floor_tokens=0)
    delay = serve_stream(fairway, steps=1000)
    assert delay is not None and delay <= fairway.cap_ratio * 500 + 10
    assert serve_stream(ShortestPrefillPolicy(), steps=1000) is None  # control: starves


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 3000), st.integers(0, 5000)), max_size=40),
       st.integers(0, 10), st.floats(0, 5), st.floats(0, 8), st.integers(0, 4096))
def test_order_is_a_deterministic_permutation(items, threshold, w, cap, floor):
    clock = max([a for _, _, a in items], default=0)
    queue = QueueView(tuple(req(f"r{i}", i, work, cached, arrived) for i, (work, cached, arrived) in enumerate(items)),
                      processed_tokens=clock)
    a = FairwayPolicy(threshold, w, cap, floor).order(queue)
    b = FairwayPolicy(threshold, w, cap, floor).order(queue)
    check_permutation(queue, a)
    assert a == b


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 3000), st.integers(0, 5000)), min_size=1, max_size=40),
       st.integers(0, 10), st.floats(0, 8), st.integers(1, 40), st.floats(1, 20_000))
def test_a_bounded_head_is_a_prefix_of_the_full_order(items, threshold, cap, admit_limit, budget):
    """The host asks only for the head it can admit; that head is the full order's."""
    clock = max(a for _, _, a in items)
    reqs = tuple(req(f"r{i}", i, work, cached, arrived) for i, (work, cached, arrived) in enumerate(items))
    full = FairwayPolicy(threshold, 0.0, cap, 0).order(QueueView(reqs, processed_tokens=clock)).order
    bounded = FairwayPolicy(threshold, 0.0, cap, 0).order(
        QueueView(reqs, processed_tokens=clock, admit_limit=admit_limit, prefill_budget_tokens=budget)).order
    work = {r.rid: max(1, r.num_uncached_tokens) for r in reqs}
    head, taken = 0, 0.0
    while head < min(admit_limit, len(full)) and taken < budget:
        taken += work[full[head]]
        head += 1
    assert bounded[:head] == full[:head] and sorted(bounded) == sorted(full)


def test_rejects_negative_parameters():
    with pytest.raises(ValueError):
        FairwayPolicy(cap_ratio=-1)
