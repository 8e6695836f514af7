"""``+cache=lru`` keeps stock SGLang's waiting-prefix refresh (``server/sglang/cache/refresh.py``).

Through the eviction seam SGLang's ``--radix-eviction-policy`` is ``switchboard``,
so its own ``_touch_waiting_prefixes`` returns early; the refresh seam runs it
again. Checked against stock SGLang on real radix trees (no model, no server).
"""

from __future__ import annotations

from array import array
from typing import Any

import pytest

from .sglang_env import cache_params, insert, make_pools, make_req, publish_test_server_args

# isort: split
# (SGLang only after .sglang_env, which installs the sgl_kernel stub)
from sglang.srt.managers.schedule_policy import SchedulePolicy
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, MatchPrefixParams
from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey

from compose.config import compose
from policies.cache.lru import LruPolicy
from policies.scheduling.shortest_prefill import ShortestPrefillPolicy
from server.resolve import resolve
from server.sglang.cache.eviction import install_eviction_policy
from server.sglang.cache.names import EVICTION_STRATEGY_NAME, register_eviction_choice
from server.sglang.cache.refresh import WaitingPrefixRefresh
from server.sglang.launch.binding import SchedulerParts, chosen
from server.sglang.scheduling.ordering import SwitchboardSchedulePolicy

PREFIX = 8


def prefix(i: int) -> list[int]:
    return list(range(1000 * (i + 1), 1000 * (i + 1) + PREFIX))


def cached(tree: RadixCache, ids: list[int]) -> int:
    """Tokens of ``ids`` the tree holds."""
    return int(tree.match_prefix(MatchPrefixParams(key=RadixKey(array("q", ids)))).device_prefix_len)


def stock_tree() -> tuple[RadixCache, Any]:
    publish_test_server_args()  # SGLang's default: --radix-eviction-policy lru
    allocator, req_pool = make_pools()
    return RadixCache(cache_params(allocator, req_pool, "lru")), allocator


def seam_tree() -> tuple[RadixCache, Any]:
    register_eviction_choice()
    install_eviction_policy(LruPolicy())
    publish_test_server_args(radix_eviction_policy=EVICTION_STRATEGY_NAME)  # what +cache=lru launches
    allocator, req_pool = make_pools()
    return RadixCache(cache_params(allocator, req_pool, EVICTION_STRATEGY_NAME)), allocator


def evicted_after_one_pass(tree: RadixCache, allocator: Any, order: Any) -> list[int]:
    """Cache prefixes 0..3 (0 oldest), order a queue reusing 0 and 1, evict one prefix."""
    for i in range(4):
        insert(tree, allocator, prefix(i))
    queue = [make_req("a", prefix(0) + [1, 2]), make_req("b", prefix(1) + [3, 4]), make_req("c", range(50, 60))]
    order.calc_priority(queue)
    tree.evict(EvictParams(num_tokens=PREFIX))
    return [i for i in range(4) if cached(tree, prefix(i)) == 0]


def test_lru_through_the_seam_evicts_what_stock_lru_evicts():
    tree, allocator = stock_tree()
    stock = evicted_after_one_pass(tree, allocator, SchedulePolicy("fcfs", tree, False, False, False))
    assert stock == [2]  # the queue's prefixes 0 and 1 were refreshed, so 2 is the oldest
    tree, allocator = seam_tree()
    ours = evicted_after_one_pass(tree, allocator, SwitchboardSchedulePolicy(
        "fcfs", tree, False, False, False, ordered=[WaitingPrefixRefresh(tree)]))
    assert ours == stock
    tree, allocator = seam_tree()
    unrefreshed = evicted_after_one_pass(tree, allocator, SwitchboardSchedulePolicy("fcfs", tree, False, False, False))
    assert unrefreshed == [0]  # what +cache=lru did before: SGLang's refresh returned early


def touches(tree: RadixCache, order: Any, passes: int) -> list[tuple[int, str]]:
    """(pass, first token of the key) of every ``touch_prefix`` over ``passes`` orders of 130 requests."""
    seen: list[tuple[int, str]] = []
    pass_no = [0]
    tree.touch_prefix = lambda key: seen.append((pass_no[0], int(key.token_ids[0])))  # type: ignore[method-assign]
    queue = [make_req(f"r{i:03d}", range(10 * i + 1, 10 * i + 6)) for i in range(130)]
    for p in range(passes):
        pass_no[0] = p
        order.calc_priority(queue)
    return seen


def test_the_refresh_runs_on_stocks_passes_over_stocks_requests_head_last():
    tree, _ = stock_tree()
    stock = touches(tree, SchedulePolicy("fcfs", tree, False, False, False), passes=40)
    assert sorted({p for p, _ in stock}) == [0, 32]
    assert [t for p, t in stock if p == 0] == [10 * i + 1 for i in reversed(range(128))]
    tree, _ = seam_tree()
    assert touches(tree, SwitchboardSchedulePolicy("fcfs", tree, False, False, False,
                                                   ordered=[WaitingPrefixRefresh(tree)]), passes=40) == stock


def test_a_pass_that_matched_the_queue_refreshes_nothing():
    tree, _ = seam_tree()
    ordered = SwitchboardSchedulePolicy("fcfs", tree, False, False, False, order=ShortestPrefillPolicy(),
                                        ordered=[WaitingPrefixRefresh(tree)])
    assert touches(tree, ordered, passes=3) == []


@pytest.mark.parametrize(("option", "refreshes"), [("lru", True), ("lfu", False), ("slru", False)])
def test_the_cache_binding_installs_the_refresh_for_the_orders_that_ask(option: str, refreshes: bool):
    plan = resolve(compose(["server.device=cpu", f"+cache={option}"]))
    parts = SchedulerParts()
    for spec, binding in chosen(plan):
        binding.install(spec, plan, parts)
    tree = RadixCache.create_simulated()
    built = [seam for factory in parts.seams if (seam := factory(type("S", (), {"tree_cache": tree})()))]
    assert [type(s) for s in built] == ([WaitingPrefixRefresh] if refreshes else [])


@pytest.fixture(autouse=True)
def sglang_config():
    publish_test_server_args()
    yield
