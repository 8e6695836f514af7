"""``radix.tiers.TieredHost``: host memory and SSD below the gap tree, placed per node."""

from __future__ import annotations

import random

from policies.cache.lru import LruPolicy
from policies.tier import Home
from radix import GapTree
from radix.tiers import TieredHost
from tests.policies.test_gap_tree import CheckedKeys, key


def tree(memory: int, ssd: int, homes: dict[int, Home] | None = None, default: Home = Home.MEMORY,
         demote: bool = False) -> tuple[GapTree, TieredHost]:
    """LRU tree of 4-token units; the placer answers ``homes[first unit of the node's path]``."""
    def placer(node, _host):
        first = node
        while first.parent is not None and first.parent.parent is not None:
            first = first.parent
        return (homes or {}).get(first.key[0], default)

    host = TieredHost(memory, ssd, placer, demote=demote)
    return GapTree(LruPolicy(), CheckedKeys(), key(), unit_tokens=4, host=host), host


def fill(t: GapTree, sessions: int, now: float = 0.0) -> list:
    """One 2-unit path per session (8 tokens each), inserted in order; their leaves."""
    leaves = []
    for s in range(sessions):
        done = t.insert(key(100 + s, 200 + s), now + s)
        leaves.append(done.node)
    return leaves


def test_homes_put_each_node_in_its_level_and_levels_stay_disjoint():
    t, host = tree(16, 16, {100: Home.MEMORY, 101: Home.SSD, 102: Home.BOTH, 103: Home.NONE})
    fill(t, 4)
    assert t.evict(32) == 32  # everything leaves the device
    levels = {n.key[0]: host.level_of(n) for n in t.nodes() if n.parent is not None and n.parent.parent is None}
    assert levels == {100: Home.MEMORY, 101: Home.SSD, 102: Home.BOTH}  # 103's path is gone
    assert host.memory.used == 16 and host.ssd.used == 16 and host.used == 24
    t.check()


def test_a_full_level_drops_its_oldest_and_demotion_moves_them_down():
    for demote, survivors in ((False, Home.NONE), (True, Home.SSD)):
        t, host = tree(16, 64, demote=demote)
        leaves = fill(t, 4)
        t.evict(32)
        # memory holds the newest 16 tokens; the two oldest paths were dropped, or demoted to SSD
        assert [host.level_of(n) for n in leaves] == [survivors, survivors, Home.MEMORY, Home.MEMORY]
        assert host.memory.used <= 16
        t.check()


def test_a_restored_node_leaves_every_level_and_a_split_keeps_its_level():
    t, host = tree(64, 64, default=Home.BOTH)
    (leaf,) = fill(t, 1)
    t.evict(8)
    assert host.level_of(leaf) is Home.BOTH
    k, node = t.match(key(100, 200, 7), 1.0)  # a match into the hollow path keeps it held
    assert k == 2 and node is leaf
    t.lock(leaf)
    t.fill(leaf, restore=True)
    t.unlock(leaf)
    assert host.level_of(leaf) is Home.NONE and host.used == 0 and host.num_restored_tokens == 8
    t.check()


def test_invariants_hold_under_random_traffic():
    rng = random.Random(3)
    homes = [Home.MEMORY, Home.SSD, Home.BOTH, Home.NONE]
    for demote in (False, True):
        t, host = tree(40, 80, {100 + s: rng.choice(homes) for s in range(12)}, demote=demote)
        for step in range(300):
            s = rng.randrange(12)
            path = key(100 + s, *(200 + s * 10 + i for i in range(rng.randint(1, 4))))
            if rng.random() < 0.3:
                k, node = t.match(path, float(step))
                if node is not t.root and t.hollow_tokens(node):
                    t.lock(node)
                    t.fill(node, restore=True)
                    t.unlock(node)
            else:
                t.insert(path, float(step))
            if rng.random() < 0.5:
                t.evict(rng.randint(1, 24))
            t.check()
            assert host.memory.used <= 40 and host.ssd.used <= 80
            both = set(host.memory.stamps) & set(host.ssd.stamps)
            assert all(host.homes[n] is Home.BOTH for n in both)
        # the traffic exercised the tier: copies were made, dropped for room and restored
        assert host.num_restored_tokens > 0 and host.num_stored_tokens > host.used + host.num_restored_tokens
