"""Tenants share nothing in any cache option: SGLang's ``cache_salt`` partitions SGLang's radix
cache under each eviction option's strategy and the gap cache (the live modules check the
same through the server: ``tests/live/harness.tenant_cache_hits``)."""

from __future__ import annotations

import itertools
from array import array

import pytest
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey

from compose.config import group_options
from compose.specs import build_policy, specs_from_config
from server.sglang.cache.eviction import PolicyEvictionStrategy
from server.sglang.cache.gap_cache import GapRadixCache, duplicate_ranges

from .sglang_env import cache_params, make_pools, publish_test_server_args

PROMPT = list(range(100, 140))
OTHER = list(range(500, 560))


@pytest.fixture(autouse=True)
def sglang_config():
    publish_test_server_args()
    yield


def option_policy(option: str):
    from compose.config import compose

    return build_policy(specs_from_config(compose(["server.device=cpu", f"+cache={option}"]))["cache"])


def make(option: str, gap: bool):
    allocator, req_pool = make_pools(256)
    policy = option_policy(option)
    if gap:
        ticks = itertools.count()
        cache = GapRadixCache(cache_params(allocator, req_pool), policy, clock=lambda: float(next(ticks)))
    else:
        cache = RadixCache(cache_params(allocator, req_pool))
        cache.eviction_strategy = PolicyEvictionStrategy(policy)
    return cache, allocator


def key(ids, salt=None, extra=None):
    return RadixKey(array("q", ids), extra, cache_salt=salt)


def insert(cache, allocator, k) -> None:
    kv = allocator.alloc(len(k.token_ids))
    result = cache.insert(InsertParams(key=k, value=kv))
    for s, e in duplicate_ranges(result):
        allocator.free(kv[s:e])


def matched(cache, k) -> int:
    return int(cache.match_prefix(MatchPrefixParams(key=k)).device_prefix_len)


CASES = [(o, False) for o in group_options("cache") if o != "penelope"] + [("penelope", True), ("lru", True)]


@pytest.mark.parametrize("option,gap", CASES, ids=[f"{o}{'-gap' if g else ''}" for o, g in CASES])
def test_a_tenants_prefix_is_matched_by_that_tenant_only(option, gap):
    cache, allocator = make(option, gap)
    insert(cache, allocator, key(PROMPT, "tenant-a"))
    assert matched(cache, key(PROMPT + [7], "tenant-a")) == len(PROMPT)
    assert matched(cache, key(PROMPT + [7], "tenant-b")) == 0
    assert matched(cache, key(PROMPT + [7])) == 0
    assert matched(cache, key(PROMPT + [7], "tenant-a", extra="lora-1")) == 0  # an adapter's own space too
    # the same tokens cached for tenant B are B's own; evicting (whatever the order) never
    # lets a third tenant or an unsalted request reach either
    insert(cache, allocator, key(PROMPT, "tenant-b"))
    assert matched(cache, key(PROMPT + [7], "tenant-b")) == len(PROMPT)
    insert(cache, allocator, key(OTHER))
    assert cache.evict(EvictParams(num_tokens=len(OTHER) // 2)).num_tokens_evicted >= len(OTHER) // 2
    assert matched(cache, key(PROMPT + [7], "tenant-c")) == 0
    assert matched(cache, key(PROMPT + [7])) == 0
