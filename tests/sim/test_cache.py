"""The simulated radix cache: matching, splitting, locking and policy-ranked eviction."""

from __future__ import annotations

from array import array

import pytest

from bench.sim.cache import PrefixCache
from policies.cache import BlockView, EvictionNeeds
from policies.cache.lfu import LfuPolicy
from policies.cache.lru import LruPolicy


def blocks(*ids: int) -> array:
    return array("q", ids)


def cache_with(*paths, policy=None, bs=10) -> PrefixCache:
    c = PrefixCache(bs, policy or LruPolicy())
    for t, p in enumerate(paths):
        c.insert(blocks(*p), len(p) * bs, now=float(t))
    c.check()
    return c


def test_match_is_the_longest_cached_prefix_and_splits_there():
    c = cache_with([1, 2, 3, 4])
    assert c.num_nodes == 1
    k, node = c.match(blocks(1, 2, 9), now=5.0)
    assert k == 2 and list(node.blocks) == [1, 2]
    assert c.num_nodes == 2  # [1, 2] -> [3, 4]
    assert c.match(blocks(7), now=5.0) == (0, c.root)
    k, node = c.match(blocks(1, 2, 3, 4, 5), now=5.0)
    assert k == 4 and list(node.blocks) == [3, 4]
    c.check()


def test_match_without_split_reports_the_containing_node():
    c = cache_with([1, 2, 3, 4])
    k, node = c.match(blocks(1, 2), now=1.0, split=False, touch=False)
    assert k == 2 and list(node.blocks) == [1, 2, 3, 4] and c.num_nodes == 1


def test_insert_adds_one_leaf_and_counts_tokens_of_a_partial_last_block():
    c = PrefixCache(16, LruPolicy())
    node, added = c.insert(blocks(1, 2, 3), input_tokens=40, now=0.0)  # 16 + 16 + 8
    assert added == 40 and node.num_tokens == 40 and c.tree_tokens == 40
    node, added = c.insert(blocks(1, 2, 5), input_tokens=48, now=1.0)
    assert added == 16 and c.tree_tokens == 56 and c.num_nodes == 3
    assert c.tokens_of(3, 40) == 40 and c.tokens_of(2, 40) == 32
    c.check()


def test_locked_paths_are_never_evicted_and_parents_go_after_children():
    c = cache_with([1, 2, 3], [1, 2, 4], [5, 6])
    _, locked = c.match(blocks(1, 2, 4), now=10.0)
    c.lock(locked)
    assert c.evictable_tokens == 10 + 20  # [3] and [5, 6]
    freed = c.evict(10_000)
    assert freed == 30 and c.tree_tokens == 30  # [1, 2] and [4] stay
    c.check()
    c.unlock(locked)
    assert c.evict(10_000) == 30 and c.tree_tokens == 0
    c.check()


def test_lru_evicts_the_least_recently_used_leaf_first():
    c = cache_with([1], [2], [3])  # inserted at t=0, 1, 2
    c.match(blocks(1), now=5.0)  # touch [1]
    assert c.evict(10) == 10
    assert c.match(blocks(2), now=6.0, touch=False)[0] == 0  # [2] went first
    assert c.match(blocks(3), now=6.0, touch=False)[0] == 1


def test_lfu_evicts_the_least_hit_leaf_first():
    c = cache_with([1], [2], policy=LfuPolicy())
    for t in range(3):  # three more requests insert through [1]
        c.insert(blocks(1), 10, now=10.0 + t)
    assert c.evict(10) == 10
    assert c.match(blocks(1), now=20.0, touch=False)[0] == 1
    assert c.match(blocks(2), now=20.0, touch=False)[0] == 0


def test_hit_count_is_per_inserting_request_as_sglang_counts_it():
    c = cache_with([1, 2])
    node, _ = c.insert(blocks(1, 2, 3), 30, now=1.0)
    head = node.parent
    assert node.hit_count == 1 and head.hit_count == 2
    # the same request inserting again (its next chunk) does not count twice
    c.insert(blocks(1, 2, 3, 4), 40, now=2.0, inserted_blocks=3)
    assert head.hit_count == 2


def test_a_policy_sees_block_views():
    seen: list[BlockView] = []

    class Recording:
        needs = EvictionNeeds()

        def rank(self, block: BlockView):
            seen.append(block)
            return (block.last_access,)

    c = PrefixCache(10, Recording())
    c.insert(blocks(1, 2), 20, now=3.0)
    c.evict(20)
    v = seen[-1]
    assert (v.num_tokens, v.prefix_len, v.last_access, v.hit_count, v.num_children) == (20, 0, 3.0, 1, 0)


def test_waiting_requests_keep_their_prefix_recent_when_touched():
    c = cache_with([1], [2])
    c.touch_waiting = True
    _, node = c.match(blocks(1), now=0.5)
    c.add_waiter(node)
    c.touch_waiting_prefixes(100.0)  # a pass at t=100 touched the waiting request's prefix
    assert c.evict(10) == 10
    assert c.match(blocks(1), now=101.0, touch=False)[0] == 1  # [2] went, though [1] was older
    c.remove_waiter(node)
    assert node.last_access == pytest.approx(100.0)
    c.check()


def test_prefix_path_orders_siblings_by_insertion():
    c = cache_with([1, 2], [1, 3], [4])
    _, a = c.match(blocks(1, 2), now=9.0)
    _, b = c.match(blocks(1, 3), now=9.0)
    _, d = c.match(blocks(4), now=9.0)
    pa, pb, pd = c.prefix_path(a), c.prefix_path(b), c.prefix_path(d)
    assert len(pa) == len(pb) == 2 and pa[0] == pb[0] and pa[1] < pb[1]
    assert len(pd) == 1 and pd[0] > pa[0]
