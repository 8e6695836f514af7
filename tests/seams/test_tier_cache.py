"""The tier cache's bookkeeping (``server/sglang/hicache/tier_cache.py``) on a hand-built tree:
the audit of the levels' disjointness, and a split's new parent keeping its child's owners,
home and release. The placement inside SGLang is shown live (``tests/live/test_server_tier.py``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("sglang")

from policies.tier import Home
from server.sglang.hicache.tier_cache import TierCache, _Owners


class Storage:
    def __init__(self, keys):
        self.keys = set(keys)

    def exists(self, key):
        return key in self.keys


def node(nid, tokens, host=True, hashes=(), children=()):
    data = SimpleNamespace(host_value=list(range(tokens)) if host else None, value=None)
    n = SimpleNamespace(id=nid, key=list(range(tokens)), hash_value=list(hashes), evicted=True,
                        component_data=[data], children={})
    for i, child in enumerate(children):
        n.children[i] = child
    return n


def cache(root, stored, in_flight=()):
    c = TierCache.__new__(TierCache)
    c.cache_controller = SimpleNamespace(storage_backend=Storage(stored))
    c.tree_core = SimpleNamespace(root_node=root, page_size=1)
    c.ongoing_backup = {i: (nid, None) for i, nid in enumerate(in_flight)}
    c.owners, c.homes, c.release = {}, {}, {}
    return c


def test_the_audit_counts_host_held_pages_storage_also_holds():
    memory = node(1, 3, hashes=("m1", "m2", "m3"))
    ssd_copy = node(2, 2, hashes=("s1", "s2"))
    ssd_only = node(3, 2, host=False, hashes=("t1", "t2"))
    both = node(4, 2, hashes=("b1", "b2"))
    writing = node(5, 2, hashes=("w1", "w2"))
    root = node(0, 0, host=False, children=(memory, ssd_only, both, writing))
    memory.children[0] = ssd_copy
    stored = {"s1", "s2", "t1", "t2", "b1", "b2", "w1", "w2"}
    c = cache(root, stored, in_flight=(5,))
    c.homes[4] = Home.BOTH
    # the host copy of the SSD block is the only page pair in both levels
    assert c.both_levels_tokens() == 2
    # a memory block whose pages reached storage is caught too, page by page
    c.cache_controller.storage_backend.keys.add("m2")
    assert c.both_levels_tokens() == 3
    # the write in flight counts once acknowledged
    c.ongoing_backup = {}
    assert c.both_levels_tokens() == 5


def test_without_storage_nothing_is_in_both_levels():
    c = cache(node(0, 0, host=False, children=(node(1, 2, hashes=("a", "b")),)), ())
    c.cache_controller.storage_backend = None
    assert c.both_levels_tokens() == 0


def test_a_splits_new_parent_keeps_its_childs_owners_home_and_release():
    child = node(7, 5)
    parent = node(9, 3, children=(child,))
    c = cache(node(0, 0, host=False, children=(parent,)), ())
    c.owners[7] = _Owners("a", "a", shared=False)
    c.homes[7], c.release[7] = Home.SSD, True
    tag = c._inherit(parent)
    assert tag == _Owners("a", "a", shared=False) and tag is not c.owners[7]
    assert c.homes[9] is Home.SSD and c.release[9] is True
    # a new leaf (no child seen before) inherits nothing
    assert c._inherit(node(11, 2)) is None and 11 not in c.homes
