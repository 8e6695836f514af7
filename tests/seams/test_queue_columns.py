"""The columnar queue seam against real SGLang 0.5.23 objects on CPU (no model, no server):
MatchTracker, QueueColumnStore, and the seam's columnar path vs its view path."""

from __future__ import annotations

import random

import numpy as np
import pytest

from .sglang_env import cache_params, insert, make_pools, make_req, publish_test_server_args

# isort: split
# (SGLang only after .sglang_env, which installs the sgl_kernel stub)
from sglang.srt.mem_cache.base_prefix_cache import EvictParams
from sglang.srt.mem_cache.radix_cache import RadixCache

from policies.scheduling import OrderDecision, QueueView
from policies.scheduling.fairway import FairwayPolicy
from server.sglang.scheduling.matching import MatchTracker
from server.sglang.scheduling.ordering import SwitchboardSchedulePolicy
from server.sglang.scheduling.queue_columns import QueueColumnStore
from server.sglang.scheduling.views import stamp_arrival


@pytest.fixture(autouse=True)
def sglang_config():
    publish_test_server_args()
    yield


def test_match_tracker_rematches_only_requests_an_insert_can_lengthen():
    allocator, req_pool = make_pools(4096)
    tree = RadixCache(cache_params(allocator, req_pool))
    tracker = MatchTracker(tree, block=16)
    tracker.watch_tree()
    shared = list(range(1000, 1100))
    a = make_req("a", shared + list(range(5000, 5040)))
    b = make_req("b", list(range(7000, 7140)))
    tracker.add(a)
    tracker.add(b)
    assert tracker.num_matches == 2 and a.num_matched_prefix_tokens == 0
    insert(tree, allocator, shared + [1])  # shares 100 tokens with a, none with b
    assert tracker.apply_inserts() == [a] and tracker.num_matches == 3  # only a was re-matched
    assert a.num_matched_prefix_tokens == 100 and b.num_matched_prefix_tokens == 0
    assert tracker.apply_inserts() == [] and tracker.num_matches == 3  # nothing new: nothing re-matched
    tracker.forget("a")
    c = make_req("c", shared[:50])
    tracker.add(c)
    # SGLang leaves the last prompt token to compute: a 50-token prompt matches 49
    assert tracker.matched("a") is None and c.num_matched_prefix_tokens == 49


def test_head_recheck_rematches_only_after_an_eviction():
    allocator, req_pool = make_pools(4096)
    tree = RadixCache(cache_params(allocator, req_pool))
    insert(tree, allocator, list(range(200)))
    r = make_req("r", list(range(200)) + [9, 9])
    tracker = MatchTracker(tree)
    tracker.watch_tree()
    tracker.add(r)
    assert r.num_matched_prefix_tokens == 200
    matches = tracker.num_matches
    assert tracker.recheck([r]) == [] and tracker.num_matches == matches  # no eviction: no re-match
    tree.evict(EvictParams(num_tokens=200))
    assert tracker.recheck([r]) == [r] and r.num_matched_prefix_tokens == 0
    assert tracker.recheck([r]) == [] and tracker.num_matches == matches + 1


def test_store_tracks_arrivals_departures_and_requeues():
    store = QueueColumnStore(capacity=2)  # grows on demand
    reqs = [make_req(f"r{i}", range(100 * i, 100 * i + 10 + i)) for i in range(5)]
    for r in reqs:
        stamp_arrival(r)
    sync = store.sync(reqs[:3])
    assert sync.arrived == reqs[:3] and sync.departed == [] and len(store) == 3
    sync = store.sync([reqs[2], reqs[0], reqs[3], reqs[4]])  # r1 left, r3 r4 came
    assert sync.arrived == [reqs[3], reqs[4]] and sync.departed == [reqs[1]] and len(store) == 4
    cols = store.columns(sync.rows, now=0.0, processed_tokens=0, num_running=0, admit_limit=None,
                         prefill_budget_tokens=np.inf)
    assert cols.num_input_tokens.tolist() == [12, 10, 13, 14]
    with pytest.raises(ValueError):
        cols.num_input_tokens[0] = 1  # read-only
    reqs[0].num_matched_prefix_tokens = 7
    store.set_cached(reqs[0])
    reqs[2].output_ids.extend([1, 2, 3])  # r2 ran, was retracted, re-queued
    store.forget(reqs[2])
    sync = store.sync([reqs[2], reqs[0], reqs[3], reqs[4]])
    assert sync.arrived == [reqs[2]] and sync.departed == []
    cols = store.columns(sync.rows, now=0.0, processed_tokens=0, num_running=0, admit_limit=None,
                         prefill_budget_tokens=np.inf)
    assert cols.num_input_tokens.tolist()[:2] == [15, 10] and cols.num_cached_tokens.tolist()[:2] == [0, 7]
    assert cols.num_output_tokens.tolist()[0] == 3


class ViewsOnly:
    """Fairway through its view-based ``order`` only (the seam cannot see ``rank``)."""

    def __init__(self, **kw) -> None:
        self.inner = FairwayPolicy(**kw)
        self.needs = self.inner.needs

    def order(self, queue: QueueView) -> OrderDecision:
        return self.inner.order(queue)


def test_columnar_and_view_paths_order_a_live_queue_identically():
    """Both seam paths on identical trees and queues over many passes: arrivals,
    admissions (inserted into the tree), evictions; the same orders throughout."""
    rng = random.Random(3)
    system = list(range(50_000, 50_300))
    worlds = []
    for make in (lambda: FairwayPolicy(queue_threshold=4, cap_ratio=2.0),
                 lambda: ViewsOnly(queue_threshold=4, cap_ratio=2.0)):
        allocator, req_pool = make_pools(60_000)
        tree = RadixCache(cache_params(allocator, req_pool))
        clock = [0]
        seam = SwitchboardSchedulePolicy("fcfs", tree, False, False, False, order=make(),
                                         prefill_clock=lambda c=clock: c[0])
        worlds.append((allocator, tree, seam, clock, []))
    count = 0
    for step in range(40):
        arrivals = []
        for _ in range(rng.randint(0, 6)):
            count += 1
            ids = (system if rng.random() < 0.7 else []) + [rng.randint(1, 40_000) for _ in range(rng.randint(5, 400))]
            arrivals.append((f"r{count}", ids))
        evict = rng.random() < 0.2
        orders = []
        for allocator, tree, seam, clock, queue in worlds:
            for rid, ids in arrivals:
                r = make_req(rid, ids)
                stamp_arrival(r, clock[0])
                seam.forget(r)
                queue.append(r)
            if evict:
                tree.evict(EvictParams(num_tokens=500))
            seam.calc_priority(queue)
            orders.append([r.rid for r in queue])
            for r in queue[:2]:  # admitted: its prompt joins the tree
                insert(tree, allocator, list(r.origin_input_ids))
                clock[0] += len(r.origin_input_ids) - r.num_matched_prefix_tokens
            del queue[:2]
        assert orders[0] == orders[1], step
    assert count > 60


def test_seam_passes_head_bounds_to_the_policy():
    seen = {}

    class Spy(FairwayPolicy):
        def rank(self, queue):
            seen["bounds"] = (queue.admit_limit, queue.prefill_budget_tokens)
            return super().rank(queue)

    tree = RadixCache.create_simulated()
    queue = [make_req(f"r{i}", range(1000 * i, 1000 * i + 50)) for i in range(5)]
    seam = SwitchboardSchedulePolicy("fcfs", tree, False, False, False, order=Spy(),
                                     head_bounds=lambda running: (3, 100.0))
    seam.calc_priority(queue)
    assert seen["bounds"] == (3, 100.0) and sorted(r.rid for r in queue) == [f"r{i}" for i in range(5)]


def test_chained_hashes_name_prefixes_in_order():
    from server.sglang.scheduling.matching import chained_hashes

    a = list(range(256))
    h = chained_hashes(a, 64, seed=1)
    assert len(h) == 4 and len(set(h)) == 4
    assert chained_hashes(a[:130], 64, seed=1) == h[:2]  # whole blocks only, prefix-consistent
    assert chained_hashes(a[:128] + [7] * 128, 64, seed=1)[:2] == h[:2]
    assert chained_hashes(a[:128] + [7] * 128, 64, seed=1)[2] != h[2]
    swapped = a[64:128] + a[:64] + a[128:]
    assert chained_hashes(swapped, 64, seed=1)[1] != h[1]  # block order matters
    assert chained_hashes(a, 64, seed=2)[0] != h[0]  # extra key / cache salt separate
    assert chained_hashes([(1, 2)] * 64, 64, seed=1) == []  # bigram keys: not tracked


def test_store_rows_follow_the_queue_through_random_edits():
    """Every pass, row i holds queue[i] (fast path or full scan) and exactly the
    requests that left are reported, whatever SGLang does to the list."""
    rng = random.Random(7)
    store = QueueColumnStore(capacity=4)
    queue, gone, count = [], [], 0
    for _ in range(300):
        before = list(queue)
        op = rng.random()
        if op < 0.5 and queue:  # admit a run of the head
            del queue[:rng.randint(1, min(4, len(queue)))]
        elif op < 0.6 and queue:  # abort from the middle
            queue.pop(rng.randrange(len(queue)))
        elif op < 0.7 and gone:  # a request that left comes back (retracted, re-queued)
            r = gone.pop(rng.randrange(len(gone)))
            r.output_ids.append(1)
            store.forget(r)
            queue.append(r)
        for _ in range(rng.randint(0, 3)):
            count += 1
            r = make_req(f"r{count}", range(count, count + 5))
            stamp_arrival(r)
            queue.append(r)
        sync = store.sync(queue)
        assert [store._reqs[row] for row in sync.rows.tolist()] == queue
        assert len(store) == len(queue)
        assert {id(r) for r in sync.departed} == {id(r) for r in before} - {id(r) for r in queue}
        gone += sync.departed
        cols = store.columns(sync.rows, now=0.0, processed_tokens=0, num_running=0, admit_limit=None,
                             prefill_budget_tokens=np.inf)
        assert cols.num_input_tokens.tolist() == [len(r.origin_input_ids) + len(r.output_ids) for r in queue]
        order = list(range(len(queue)))
        rng.shuffle(order)
        queue[:] = [queue[i] for i in order]
        store.remember(queue, sync.rows[np.array(order, dtype=np.int64)] if order else sync.rows)
