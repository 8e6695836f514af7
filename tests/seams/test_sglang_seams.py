"""The adapter's seams against real SGLang 0.5.23 objects on CPU (no model, no server)."""

from __future__ import annotations

from http import HTTPStatus
from types import SimpleNamespace

import pytest

from .sglang_env import cache_params, insert, make_pools, make_req, publish_test_server_args

# isort: split
# (SGLang only after .sglang_env, which installs the sgl_kernel stub)
from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder, SchedulePolicy
from sglang.srt.mem_cache.radix_cache import RadixCache

from policies.admission import AdmissionAction, AdmissionDecision, AdmissionNeeds
from policies.admission.max_queue import MaxQueuePolicy
from policies.cache.fifo import FifoPolicy
from policies.cache.filo import FiloPolicy
from policies.cache.lfu import LfuPolicy
from policies.cache.lru import LruPolicy
from policies.cache.mru import MruPolicy
from policies.cache.priority import PriorityPolicy
from policies.cache.slru import SlruPolicy
from policies.scheduling.shortest_prefill import ShortestPrefillPolicy
from server.sglang.cache.eviction import (
    PolicyEvictionStrategy,
    block_view,
)
from server.sglang.scheduling.gate import AdmissionGate, gated_adder, is_deferred
from server.sglang.scheduling.ordering import SwitchboardSchedulePolicy


@pytest.fixture(autouse=True)
def sglang_config():
    publish_test_server_args()
    yield


def test_shortest_prefill_seam_orders_by_uncached_tokens_from_the_real_cache():
    allocator, req_pool = make_pools()
    tree = RadixCache(cache_params(allocator, req_pool))
    long_cached = list(range(1000, 1120))
    insert(tree, allocator, long_cached[:110])  # 110 of 120 tokens cached -> 10 uncached
    queue = [make_req("long_uncached", range(5000, 5060)),  # 60 uncached
             make_req("long_cached", long_cached),
             make_req("short", range(7000, 7030))]          # 30 uncached
    policy = SwitchboardSchedulePolicy("fcfs", tree, False, False, False, order=ShortestPrefillPolicy())
    policy.calc_priority(queue)
    assert [r.rid for r in queue] == ["long_cached", "short", "long_uncached"]
    assert queue[0].num_matched_prefix_tokens == 110


def test_seam_holds_its_order_beyond_sglangs_128_request_fallback():
    tree = RadixCache.create_simulated()
    queue = [make_req(f"r{i:03d}", range(10_000 * i, 10_000 * i + 300 - i)) for i in range(200)]
    policy = SwitchboardSchedulePolicy("fcfs", tree, False, False, False, order=ShortestPrefillPolicy())
    policy.calc_priority(queue)
    assert [r.rid for r in queue] == [f"r{i:03d}" for i in reversed(range(200))]


def test_without_an_order_policy_sglangs_own_order_applies():
    tree = RadixCache.create_simulated()
    reqs = [make_req(str(i), range(100 * i, 100 * i + n), max_new_tokens=m)
            for i, (n, m) in enumerate([(5, 8), (9, 64), (3, 16)])]
    ours, stock = list(reqs), list(reqs)
    SwitchboardSchedulePolicy("lof", tree, False, False, False).calc_priority(ours)
    SchedulePolicy("lof", tree, False, False, False).calc_priority(stock)
    assert [r.rid for r in ours] == [r.rid for r in stock] == ["1", "2", "0"]


class FakeScheduler(SimpleNamespace):
    """The few scheduler members AdmissionGate touches, recording aborts."""

    def __init__(self, waiting=()):
        super().__init__(waiting_queue=list(waiting), running_batch=SimpleNamespace(reqs=[object()]),
                         token_to_kv_pool_allocator=SimpleNamespace(available_size=lambda: 100),
                         max_total_num_tokens=600, aborts=[], released=[])

    def send_abort_output(self, abort_req, req):
        self.aborts.append((abort_req, req))

    def _release_aborted_request(self, req):
        self.released.append(req)


def test_gate_rejects_with_429_and_retry_after_past_max_queue():
    waiting = [make_req(f"w{i}", [i]) for i in range(2)]
    sched = FakeScheduler(waiting)
    gate = AdmissionGate(sched, MaxQueuePolicy(max_waiting=2, retry_after_s=2.5))
    new = make_req("new", [9])
    assert gate.on_arrival(new) is False
    abort_req, req = sched.aborts[0]
    assert req is new and abort_req.rid == "new"
    reason = abort_req.finished_reason
    assert reason["status_code"] == HTTPStatus.TOO_MANY_REQUESTS
    assert reason["message"].endswith("retry after 3 s") and "max_waiting=2" in reason["message"]
    assert gate.on_arrival(make_req("ok", [1])) is False  # still full
    sched.waiting_queue.pop()
    assert gate.on_arrival(make_req("fits", [1])) is True


class DeferThenDecide:
    """Defers everything until told what to do."""

    needs = AdmissionNeeds()

    def __init__(self):
        self.next = AdmissionDecision(AdmissionAction.DEFER)

    def decide(self, view):
        return self.next


def counts(gate: AdmissionGate) -> dict[str, float]:
    """The gate's Prometheus counters (process-wide: compare differences)."""
    return {name: c._value.get() for name, c in gate._counters.items()}


def test_deferred_requests_sort_last_are_revisited_and_never_prefilled():
    tree = RadixCache.create_simulated()
    sched = FakeScheduler()
    policy = DeferThenDecide()
    gate = AdmissionGate(sched, policy)
    start = counts(gate)
    held, later = make_req("held", range(50)), make_req("later", range(100, 110))
    assert gate.on_arrival(held) and is_deferred(held)
    sched.waiting_queue.append(held)
    policy.next = AdmissionDecision(AdmissionAction.ADMIT)
    assert gate.on_arrival(later) and not is_deferred(later)
    sched.waiting_queue.append(later)

    policy.next = AdmissionDecision(AdmissionAction.DEFER)
    sp = SwitchboardSchedulePolicy("fcfs", tree, False, False, False, gate=gate)
    sp.calc_priority(sched.waiting_queue)
    assert [r.rid for r in sched.waiting_queue] == ["later", "held"]

    allocator, req_pool = make_pools()
    adder = gated_adder(PrefillAdder)(1, tree, allocator, None, 0.5, 1000, None)
    later.init_next_round_input(tree)
    held.init_next_round_input(tree)
    assert adder.add_one_req(later, False, None) == AddReqResult.CONTINUE
    assert adder.add_one_req(held, False, None) == AddReqResult.OTHER
    assert [r.rid for r in adder.can_run_list] == ["later"]

    policy.next = AdmissionDecision(AdmissionAction.REJECT, retry_after_s=1, reason="too long")
    sp.calc_priority(sched.waiting_queue)
    assert [r.rid for r in sched.waiting_queue] == ["later"]
    assert sched.aborts[-1][1] is held and sched.released == [held]
    end = counts(gate)
    assert {k: end[k] - start[k] for k in end} == {"deferred": 1, "admitted_after_deferral": 0, "rejected": 1}


def test_a_held_request_admitted_on_a_later_pass_is_counted_once():
    sched = FakeScheduler()
    policy = DeferThenDecide()
    gate = AdmissionGate(sched, policy)
    start = counts(gate)
    held = make_req("held", range(20))
    assert gate.on_arrival(held) and is_deferred(held)
    sched.waiting_queue.append(held)
    gate.revisit(sched.waiting_queue)  # still deferred: nothing moves
    policy.next = AdmissionDecision(AdmissionAction.ADMIT)
    gate.revisit(sched.waiting_queue)
    gate.revisit(sched.waiting_queue)  # admitted: no longer revisited
    assert not is_deferred(held) and sched.waiting_queue == [held] and sched.aborts == []
    end = counts(gate)
    assert {k: end[k] - start[k] for k in end} == {"deferred": 1, "admitted_after_deferral": 1, "rejected": 0}


EVICTION_PAIRS = [("lru", LruPolicy()), ("lfu", LfuPolicy()), ("fifo", FifoPolicy()), ("mru", MruPolicy()),
                  ("filo", FiloPolicy()), ("priority", PriorityPolicy()), ("slru", SlruPolicy())]


def _evicted_tree(strategy) -> list[tuple[int, ...]]:
    """The keys left after evicting 6 tokens from a tree whose blocks differ in
    creation order, recency and hit counts (re-inserts bump both)."""
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    allocator, req_pool = make_pools(512)
    tree = RadixCache(cache_params(allocator, req_pool))
    tree.eviction_strategy = strategy
    for seq in ([1, 2, 3, 4, 5, 6], [1, 2, 3, 7, 8], [9, 10, 11], [1, 2, 12, 13, 14, 15], [9, 10, 16],
                [9, 10, 11], [1, 2, 3, 4, 5, 6], [9, 10, 11], [20, 21, 22, 23]):
        insert(tree, allocator, seq)
    before = tree.evictable_size()
    tree.evict(EvictParams(num_tokens=6))
    assert before - tree.evictable_size() >= 6
    return sorted(tuple(n.key.token_ids) for n in _nodes(tree.root_node) if n.key is not None)


@pytest.mark.parametrize("name,policy", EVICTION_PAIRS, ids=[n for n, _ in EVICTION_PAIRS])
def test_eviction_policy_through_the_seam_evicts_what_sglangs_own_strategy_evicts(name, policy):
    from sglang.srt.mem_cache.utils import _EVICTION_POLICY_FACTORIES

    ours = _evicted_tree(PolicyEvictionStrategy(policy))
    assert ours == _evicted_tree(_EVICTION_POLICY_FACTORIES[name]())


def test_the_eviction_comparison_tells_orders_apart():
    from sglang.srt.mem_cache.utils import _EVICTION_POLICY_FACTORIES

    left = {name: tuple(_evicted_tree(_EVICTION_POLICY_FACTORIES[name]())) for name, _ in EVICTION_PAIRS}
    # NOTE: priority equals lru here (no request priorities); every other pair differs somewhere
    assert len(set(left.values())) >= 4, left


def _nodes(node):
    for child in node.children.values():
        yield child
        yield from _nodes(child)


def test_block_view_reads_a_real_tree_node():
    allocator, req_pool = make_pools()
    tree = RadixCache(cache_params(allocator, req_pool))
    insert(tree, allocator, [1, 2, 3, 4])
    insert(tree, allocator, [1, 2, 3, 9, 9])  # splits: [1,2,3] -> {[4], [9,9]}
    leaf = next(n for n in _nodes(tree.root_node) if n.key is not None and list(n.key.token_ids) == [9, 9])
    view = block_view(leaf)
    assert (view.num_tokens, view.prefix_len, view.num_children) == (2, 3, 0)


def test_kv_fit_check_rejects_only_what_can_never_fit():
    from server.sglang.scheduling.scheduler import kv_fit_error
    from server.sglang.scheduling.state import state_of

    assert kv_fit_error(make_req("ok", range(100), max_new_tokens=500), capacity=600) is None
    error = kv_fit_error(make_req("big", range(100), max_new_tokens=501), capacity=600)
    assert "601 KV-cache tokens (100 prompt + 501 max_tokens)" in error and "at most 600" in error
    # SGLang clips max_new_tokens to the pool before queueing; the client's value counts.
    clipped = make_req("clipped", range(100), max_new_tokens=499)
    state_of(clipped).max_new_recorded, state_of(clipped).requested_max_new_tokens = True, 1000
    assert "1100 KV-cache tokens" in kv_fit_error(clipped, capacity=600)


def test_chunk_limit_seams_bound_sglangs_own_and_the_smallest_wins():
    class Bound:
        def __init__(self, tokens):
            self.tokens, self.asked = tokens, 0

        def chunk_limit(self, tree_cache, chunked_req):
            self.asked += 1
            return self.tokens

    tree = RadixCache.create_simulated()
    req = SimpleNamespace(prefix_len=0, full_untruncated_fill_ids=list(range(100)))
    plain = SwitchboardSchedulePolicy("fcfs", tree, False, False, False)
    assert plain.shortest_prefill_chunk_limit(req, [], 64, 1) is None  # SGLang's own: no bound under fcfs
    seams = [Bound(7), Bound(None), Bound(3)]
    bounded = SwitchboardSchedulePolicy("fcfs", tree, False, False, False, chunk_limits=seams)
    assert bounded.shortest_prefill_chunk_limit(req, [], 64, 1) == 3
    assert [s.asked for s in seams] == [1, 1, 1]
