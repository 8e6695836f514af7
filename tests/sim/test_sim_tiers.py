"""The simulator's tier pieces (``bench/sim/tiers.py``): session stats, the placer, the SSD's queue."""

from __future__ import annotations

import pytest

from bench.sim.tiers import SsdDevice, make_placer
from policies.cache.lru import LruPolicy
from policies.tier import Home, PlacementView
from policies.tier.sessions import SessionStats
from radix import GapTree
from radix.tiers import TieredHost
from tests.policies.test_gap_tree import CheckedKeys, key


class Recording:
    """A tier policy that records its views and answers a fixed home."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.views: list[PlacementView] = []

    def place(self, view: PlacementView) -> Home:
        self.views.append(view)
        return self.home


def test_session_stats_know_only_what_arrived_and_finished():
    stats = SessionStats()
    stats.arrived("s", 100)
    assert stats.of("s") == (100, 1, 0)
    stats.finished("s", 100, 20)
    stats.arrived("s", 150)
    assert stats.of("s") == (150, 2, 20)
    stats.arrived(None, 99)
    assert stats.of(None) == (0, 0, 0) and stats.of("other") == (0, 0, 0)


def test_the_placer_shows_the_policy_the_node_its_session_and_the_free_space():
    stats, policy, now = SessionStats(), Recording(Home.SSD), [5.0]
    stats.arrived("a", 8)
    host = TieredHost(64, 128, make_placer(policy, stats, lambda: now[0], block_size=4))
    t = GapTree(LruPolicy(), CheckedKeys(), key(), unit_tokens=4, host=host)
    t.insert(key(1, 2), 0.0, session="a")
    t.insert(key(1, 3), 1.0, session="b")  # [1] is now shared by a and b
    t.evict(16)
    # the leaves first, oldest first, then the shared system prompt [1]
    assert [(v.prefix_tokens, v.session_id, v.shared, v.ssd_free_tokens) for v in policy.views] == [
        (4, "a", False, 128), (4, "b", False, 124), (0, "a", True, 120)]
    assert policy.views[0] == PlacementView(
        tokens=4, prefix_tokens=4, shared=False, session_id="a", session_tokens=8, session_turns=1,
        last_reply_tokens=0, host_free_tokens=64, host_capacity_tokens=64, ssd_free_tokens=128,
        ssd_capacity_tokens=128, now=5.0)
    assert (policy.views[1].session_tokens, policy.views[1].session_turns) == (0, 1)  # b never arrived here
    t.check()


def test_a_placer_answer_the_host_cannot_honour_is_refused():
    host = TieredHost(64, 0, make_placer(Recording(Home.SSD), SessionStats(), lambda: 0.0, block_size=4))
    t = GapTree(LruPolicy(), CheckedKeys(), key(), unit_tokens=4, host=host)
    t.insert(key(1), 0.0)
    with pytest.raises(ValueError, match="no SSD level"):
        t.evict(4)


def test_reads_queue_behind_writes_and_pay_a_latency_per_read():
    ssd = SsdDevice(read_gbs=2.0, write_gbs=1.0, read_latency_s=1e-4)
    assert ssd.read(0.0, 2e9, reads=1) == pytest.approx(1.0001)
    ssd.write(2.0, 1e9)  # busy until 3.0
    assert ssd.read(2.5, 0.0, reads=10) == pytest.approx(0.5 + 10e-4)
    # contiguous segments: one read instead of one per page, same bytes
    a, b = SsdDevice(2.0, 1.0, 1e-4), SsdDevice(2.0, 1.0, 1e-4)
    assert a.read(0.0, 1e6, reads=1) < b.read(0.0, 1e6, reads=64)
    with pytest.raises(ValueError):
        SsdDevice(0.0, 1.0, 0.0)


# --------------------------------------------------------------- the binding's levels

from bench.sim import SimParts, build_simulator  # noqa: E402
from bench.sim.tiers import TierLevels, TierSeam  # noqa: E402
from policies.tier import TierHostConfig, TierNeeds  # noqa: E402
from policies.tier.exclusive import ExclusivePolicy  # noqa: E402
from policies.tier.flatcake import FlatCakePolicy  # noqa: E402
from policies.tier.hierarchical import HierarchicalPolicy  # noqa: E402
from policies.tier.ssd_only import SsdOnlyPolicy  # noqa: E402
from tests.sim.helpers import LinearCost, req, settings, trace_of  # noqa: E402

BPT = 1000.0
"""KV bytes per token in these tests."""


class Placing(Recording):
    def __init__(self, home: Home, segments: bool = False) -> None:
        super().__init__(home)
        self.needs = TierNeeds(segments=segments)


def _levels(policy, memory_ratio=1.0, ssd_tokens=1000, segment_tokens=8, page_tokens=4, now=(0.0,)):
    host = TierHostConfig(host_ratio=memory_ratio, ssd_dir="/ssd", ssd_gb=ssd_tokens * BPT / 1e9,
                          segment_tokens=segment_tokens)
    ssd = SsdDevice(read_gbs=1e-3, write_gbs=1e-3, read_latency_s=0.5)  # 1e6 B/s: 1 ms per token
    levels = TierLevels(policy, host, SessionStats(), ssd, host_bandwidth_gbs=1e-3 * 10, page_tokens=page_tokens)
    tier = levels.bind(lambda: now[0], 100, BPT, 4)
    return levels, tier


def test_the_levels_are_sized_from_the_device_pool_and_the_ssd_bytes():
    levels, tier = _levels(Placing(Home.MEMORY), memory_ratio=2.5, ssd_tokens=1000)
    assert (tier.memory.capacity, tier.ssd.capacity) == (250, 1000)


@pytest.mark.parametrize("home, reads, ssd_s", [
    (Home.MEMORY, 0, 0.0),                         # host copy only
    (Home.SSD, 2 + 2, 16e-3 + 4 * 0.5),            # one read per 4-token page: 2 per node
])
def test_a_restore_costs_its_ssd_reads_then_the_host_copy(home, reads, ssd_s):
    levels, tier = _levels(Placing(home))
    t = GapTree(LruPolicy(), CheckedKeys(), key(), unit_tokens=4, host=tier)
    t.insert(key(1, 2, 3, 4), 0.0, session="a")
    t.split(t.match(key(1, 2, 3, 4), 0.0)[1], 2)
    levels.ssd.busy_until = 0.0
    nodes = [n for n in t.nodes()]
    t.evict(16)
    assert all(n.on_host for n in nodes)
    levels.ssd.busy_until, levels.ssd.bytes_written = 0.0, 0.0  # NOTE: writes priced in their own test
    levels.restoring(nodes)
    host_s = 16 * BPT / 1e7
    assert levels.ssd_reads == reads
    assert levels.take_restore_s() == pytest.approx(ssd_s + host_s)
    assert levels.take_restore_s() == 0.0  # taken once
    assert levels.restored_from[Home.SSD] == (16 if home is Home.SSD else 0)


def test_a_sessions_contiguous_blocks_cost_one_read_per_segment():
    levels, tier = _levels(Placing(Home.SSD, segments=True), segment_tokens=8)
    t = GapTree(LruPolicy(), CheckedKeys(), key(), unit_tokens=4, host=tier)
    t.insert(key(1, 2, 3, 4), 0.0, session="a")
    t.split(t.match(key(1, 2, 3, 4), 0.0)[1], 2)
    nodes = list(t.nodes())
    t.evict(16)
    levels.ssd.busy_until = 0.0
    levels.restoring(nodes)  # 16 tokens of one session: 2 segment reads, not 4 page reads
    assert levels.ssd_reads == 2


def test_writes_to_ssd_delay_the_reads_behind_them():
    now = [0.0]
    levels, tier = _levels(Placing(Home.SSD), now=now)
    t = GapTree(LruPolicy(), CheckedKeys(), key(), unit_tokens=4, host=tier)
    t.insert(key(1, 2), 0.0, session="a")
    node = next(iter(t.nodes()))
    t.evict(8)
    assert levels.ssd.bytes_written == 8 * BPT and levels.ssd.busy_until == pytest.approx(8e-3)
    levels.restoring([node])
    assert levels.take_restore_s() == pytest.approx(8e-3 + 8e-3 + 2 * 0.5 + 8 * BPT / 1e7)


class TierCost(LinearCost):
    """``LinearCost`` with KV bytes and a restore wait added to the prefill pass."""

    kv_bytes_per_token = BPT

    def prefill_time(self, extends, gaps=(), extra_s=0.0):  # type: ignore[override]
        return super().prefill_time(extends) + self.per_token * sum(t for t, _ in gaps) + extra_s


def _sessions(n_sessions=6, turns=4, prompt=64):
    """Sessions whose turns extend their history, spaced so the device pool must evict."""
    out, block = [], 1
    for s in range(n_sessions):
        blocks: list[int] = []
        for k in range(turns):
            blocks = blocks + list(range(block, block + prompt // 16))
            block += prompt // 16
            out.append(req(f"s{s}t{k}", 10.0 * k + s, 16 * len(blocks), 4, blocks, session_id=f"s{s}"))
    return trace_of(out, block_size=16)


@pytest.mark.parametrize("policy", [HierarchicalPolicy(), SsdOnlyPolicy(), ExclusivePolicy(), FlatCakePolicy()],
                         ids=["hierarchical", "ssd_only", "exclusive", "flatcake"])
def test_every_option_restores_what_it_placed_and_keeps_levels_disjoint_unless_inclusive(policy):
    stats = SessionStats()
    levels = TierLevels(policy, TierHostConfig(host_ratio=0.5, ssd_dir="/ssd", ssd_gb=1e-3), stats,
                        SsdDevice(7.0, 5.0, 1e-4), host_bandwidth_gbs=50.0, page_tokens=16)
    seam = TierSeam(stats, policy)
    parts = SimParts(host_levels=levels, seams=[seam], observers=[seam])
    sim = build_simulator(_sessions(), TierCost(), settings(capacity=600), parts)
    sim.run()
    tier = levels.tier
    assert tier is not None and sim.restored_tokens > 0
    assert sum(levels.restored_from.values()) == sim.restored_tokens
    both = set(tier.memory.stamps) & set(tier.ssd.stamps)
    if isinstance(policy, HierarchicalPolicy):
        assert levels.restored_from[Home.SSD] == 0 or tier.ssd.used > 0
    else:
        assert not both  # NOTE: the exclusive options never hold a block twice
    if isinstance(policy, SsdOnlyPolicy):
        assert levels.restored_from[Home.MEMORY] == 0 and tier.memory.used == 0
    sim.cache.check()
    assert stats.of("s0")[1] == 4  # every turn arrived
