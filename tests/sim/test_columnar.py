"""The simulator's columnar path (``bench/sim/columns.py``, head bounds) decides exactly
what the view path decides with the policy ordering the whole queue.

Reference: the same policy wrapped so that it only answers ``order(QueueView)``;
the simulator then builds views and never passes head bounds, and the policy's
``order`` ranks the full queue. Every request must get the same first token,
finish time and cache hit on a workload that keeps hundreds waiting behind a
few slots and a small prefill budget (so the bounds cut the head short).
"""

from __future__ import annotations

import random

import pytest

from bench.sim.signal import LengthSignal
from policies.scheduling import OrderDecision, QueueView, SchedulingNeeds
from policies.scheduling.columns import RanksColumns
from policies.scheduling.fairway import FairwayPolicy
from policies.scheduling.leap import LeapPolicy
from tests.sim.helpers import req, simulate, trace_of


class Recorded:
    """``policy`` as is, recording each pass's queue length and head bound."""

    def __init__(self, policy) -> None:
        self.policy = policy
        self.needs: SchedulingNeeds = policy.needs
        self.passes: list[tuple[int, int]] = []

    def rank(self, queue):
        self.passes.append((len(queue), queue.head_size))
        return self.policy.rank(queue)

    def order(self, queue: QueueView) -> OrderDecision:
        decision: OrderDecision = self.policy.order(queue)
        return decision


class ViewsOnly:
    """``policy`` without its ``rank``: the host must take the view path."""

    def __init__(self, policy) -> None:
        self.policy = policy
        self.needs: SchedulingNeeds = policy.needs

    def order(self, queue: QueueView) -> OrderDecision:
        decision: OrderDecision = self.policy.order(queue)
        return decision


def overload(seed: int, n: int = 400):
    """Bursty arrivals sharing a few chained prefixes; far more work than the slots serve."""
    rng = random.Random(seed)
    reqs, fresh = [], 10_000
    for i in range(n):
        root = rng.randrange(6)
        blocks = [root * 100 + k for k in range(rng.randint(0, 3))] + list(range(fresh, fresh + rng.randint(1, 6)))
        fresh += 10
        reqs.append(req(f"r{i}", rng.uniform(0, 4.0), 16 * len(blocks), rng.randint(1, 40), blocks))
    return trace_of(reqs, block_size=16)


def outcome(sim) -> dict:
    return {rid: (r.phase, r.first_token_s, r.finish_s, r.cached_first, r.retractions)
            for rid, r in sim.requests.items()}


POLICIES = {
    "fairway-cap": lambda: FairwayPolicy(queue_threshold=0, aging_weight=0.5, cap_ratio=0.5),
    "fairway-default": FairwayPolicy,
    "leap": lambda: LeapPolicy(feature_dim=1, aging_tokens=4096.0),
}


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", sorted(POLICIES))
def test_columnar_path_with_head_bounds_equals_the_full_view_order(name, seed):
    trace = overload(seed)
    kw = dict(max_running_requests=4, max_prefill_tokens=256, capacity=6000,
              length_signal=LengthSignal(0.5, seed=seed))
    recorded = Recorded(POLICIES[name]())
    fast = simulate(trace, order=recorded, **kw)
    slow = simulate(trace, order=ViewsOnly(POLICIES[name]()), **kw)
    assert isinstance(recorded, RanksColumns) and fast.queue.store is not None
    assert slow.queue.store is None
    # the bounds did cut: hundreds waited while at most a few could be admitted
    assert max(n for n, _ in recorded.passes) > 200
    assert max(head for n, head in recorded.passes if n > 200) <= 4
    assert outcome(fast) == outcome(slow)
