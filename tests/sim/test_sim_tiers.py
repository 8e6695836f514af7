"""The simulator's tier pieces (``bench/sim/tiers.py``): session stats, the placer, the SSD's queue."""

from __future__ import annotations

import pytest

from bench.sim.tiers import SessionStats, SsdDevice, make_placer
from policies.cache.lru import LruPolicy
from policies.tier import Home, PlacementView
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
