"""HiState's eviction order (``policies/cache/histate.py``) on hand-built views."""

from __future__ import annotations

import math
import random

import pytest

from policies.cache import BlockView, EvictionNeeds
from policies.cache.histate import HistatePolicy
from policies.cache.lru import LruPolicy

KV_BYTES_PER_TOKEN = 4096
STATE_BYTES = 8 << 20


def kv(block_id: int, tokens: int, last: float, tier: str = "device") -> BlockView:
    return BlockView(block_id=block_id, num_tokens=tokens, prefix_len=0, last_access=last, created=last,
                     item="kv", nbytes=tokens * KV_BYTES_PER_TOKEN, recompute_tokens=tokens, tier=tier)  # type: ignore[arg-type]


def state(block_id: int, recompute: int, last: float, tier: str = "device") -> BlockView:
    return BlockView(block_id=block_id, num_tokens=0, prefix_len=0, last_access=last, created=last,
                     item="state", nbytes=STATE_BYTES, recompute_tokens=recompute, tier=tier)  # type: ignore[arg-type]


def order(policy, views):
    return [v.block_id for v in sorted(views, key=policy.rank)]


def test_declares_snapshots_and_the_waiting_refresh_only():
    assert HistatePolicy.needs == EvictionNeeds(snapshots=True, refresh_waiting=True)
    assert not HistatePolicy.needs.interior


def test_between_kv_blocks_it_is_least_recently_used_whatever_their_size():
    rng = random.Random(0)
    views = [kv(i, rng.randint(1, 4000), rng.uniform(0, 1000)) for i in range(50)]
    assert order(HistatePolicy(tau_s=60.0), views) == order(LruPolicy(), views)


def test_a_snapshot_worth_k_times_kv_per_byte_outlives_kv_by_tau_ln_k():
    policy = HistatePolicy(tau_s=60.0)
    # the snapshot spares 8 x as many tokens per byte as KV does
    k = 8.0
    snap = state(1, recompute=int(k * STATE_BYTES / KV_BYTES_PER_TOKEN), last=100.0)
    lead = 60.0 * math.log(k)
    assert policy.rank(snap)[0] - policy.rank(kv(2, 10, last=100.0))[0] == pytest.approx(lead)
    # KV touched just under tau ln k later still goes first; just over, the snapshot goes first
    assert order(policy, [snap, kv(2, 10, last=100.0 + lead - 1)]) == [2, 1]
    assert order(policy, [snap, kv(2, 10, last=100.0 + lead + 1)]) == [1, 2]


def test_a_snapshot_whose_loss_costs_nothing_goes_first():
    policy = HistatePolicy()
    free = state(1, recompute=0, last=1e9)
    assert order(policy, [kv(2, 100, last=0.0), state(3, 50, last=0.0), free])[0] == 1


def test_more_recompute_per_byte_is_kept_longer_at_equal_recency():
    policy = HistatePolicy(tau_s=10.0)
    cheap, dear = state(1, recompute=100, last=5.0), state(2, recompute=10_000, last=5.0)
    assert order(policy, [dear, cheap]) == [1, 2]


def test_tau_zero_is_least_recently_used_across_kinds_value_breaking_ties():
    policy = HistatePolicy(tau_s=0.0)
    views = [state(1, 10_000, last=3.0), kv(2, 10, last=2.0), state(3, 10_000, last=2.0)]
    assert order(policy, views) == [2, 3, 1]  # at t=2: the KV (less per byte) before the snapshot


def test_ranks_need_no_clock_the_order_is_the_same_whenever_computed():
    # NOTE: a heap host ranks an item once; shifting every access by the same time keeps the order
    rng = random.Random(1)
    views = [state(i, rng.randint(0, 50_000), rng.uniform(0, 500)) if i % 3 == 0
             else kv(i, rng.randint(1, 3000), rng.uniform(0, 500)) for i in range(60)]
    shifted = [BlockView(**{**{f: getattr(v, f) for f in v.__dataclass_fields__},
                            "last_access": v.last_access + 1e6, "created": v.created + 1e6}) for v in views]
    policy = HistatePolicy(tau_s=30.0)
    assert order(policy, views) == order(policy, shifted)


@pytest.mark.parametrize("tau", [-1.0, math.inf, math.nan])
def test_a_nonsense_tau_is_refused_naming_the_field(tau):
    with pytest.raises(ValueError, match="cache.tau_s"):
        HistatePolicy(tau_s=tau)
