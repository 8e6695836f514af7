"""The simulated prefix cache's binding of the gap tree: block-id matching, token
counts of partial blocks, the index and the hooks (the tree itself: tests/policies/test_gap_tree.py)."""

from __future__ import annotations

from array import array

from bench.sim.cache import PrefixCache
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
    assert k == 2 and list(node.key) == [1, 2]
    assert c.num_nodes == 2  # [1, 2] -> [3, 4]
    assert c.match(blocks(7), now=5.0) == (0, c.root)
    k, node = c.match(blocks(1, 2, 3, 4, 5), now=5.0)
    assert k == 4 and list(node.key) == [3, 4]
    c.check()


def test_match_without_split_reports_the_containing_node():
    c = cache_with([1, 2, 3, 4])
    k, node = c.match(blocks(1, 2), now=1.0, split=False, touch=False)
    assert k == 2 and list(node.key) == [1, 2, 3, 4] and c.num_nodes == 1


def test_insert_adds_one_leaf_and_counts_tokens_of_a_partial_last_block():
    c = PrefixCache(16, LruPolicy())
    node, added = c.insert(blocks(1, 2, 3), input_tokens=40, now=0.0)  # 16 + 16 + 8
    assert added == 40 and node.num_tokens == 40 and c.tree_tokens == 40
    node, added = c.insert(blocks(1, 2, 5), input_tokens=48, now=1.0)
    assert added == 16 and c.tree_tokens == 56 and c.num_nodes == 3
    assert c.tokens_of(3, 40) == 40 and c.tokens_of(2, 40) == 32
    c.check()


def test_hooks_index_blocks_and_tell_the_queue_what_changed():
    c = PrefixCache(10, LruPolicy())
    inserted, evicted = [], []
    c.on_insert, c.on_evict = inserted.append, evicted.append
    c.insert(blocks(1, 2), 20, now=0.0)
    c.insert(blocks(1, 2, 3), 30, now=1.0)
    c.insert(blocks(1, 2), 20, now=2.0)  # nothing new
    assert inserted == [1, 3]
    c.check()  # every cached block maps to its node
    assert c.evict(10) == 10 and [list(n.key) for n in evicted] == [[3]]
    assert c.match(blocks(1, 2, 3), now=3.0, touch=False)[0] == 2
    assert c.seen_tokens(blocks(1, 2, 3, 4), 40) == 30  # evicted, but seen
    assert c.seen_tokens(blocks(5), 10) == 0
    c.check()
