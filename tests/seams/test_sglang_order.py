"""The simulator orders a waiting queue exactly as real SGLang does.

One scenario (cached prefixes, branches, matches ending inside radix nodes,
in-batch prefix duplicates, fully cached prompts, ties) is built twice: as
SGLang ``Req``s over SGLang's own ``RadixCache``, sorted by SGLang's
``SchedulePolicy.calc_priority``; and as simulator requests over the
simulator's prefix cache, sorted by the simulator's waiting queue with the
pure policy. Both orders must be identical.
"""

from __future__ import annotations

from array import array

import pytest

from server.sglang.launch.stub import install_sgl_kernel_stub

install_sgl_kernel_stub()  # NOTE: before the first SGLang import

import torch
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.managers.schedule_policy import SchedulePolicy
from sglang.srt.mem_cache.base_prefix_cache import InsertParams
from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey
from sglang.srt.runtime_context import SpawnRanks, publish, reset_context
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.server_args import ServerArgs

from bench.sim.cache import PrefixCache
from bench.sim.queue import WaitingQueue
from bench.sim.request import SimRequest
from bench.traces.trace import TraceRequest
from policies.cache.lru import LruPolicy
from policies.scheduling.dfs_weight import DfsWeightPolicy
from policies.scheduling.fcfs import FcfsPolicy
from policies.scheduling.hrrn import HrrnPolicy
from policies.scheduling.lof import LofPolicy
from policies.scheduling.lpm import LpmPolicy
from policies.scheduling.shortest_prefill_first import ShortestPrefillFirstPolicy

BS = 16  # tokens per block; SGLang's in-batch threshold (32) spans two blocks

#: Cached before the pass, in this order (prefix-chained block ids).
CACHED = [[1, 2, 3, 4], [1, 2, 5], [10, 11, 12], [20, 21], [1, 2, 3, 4, 7]]

#: Waiting requests in arrival (= queue) order:
#: (blocks, prompt tokens, max_new_tokens, arrival_processed_tokens, queue entry time).
WAITING = [
    ([1, 2, 3, 4, 6, 90], 96, 64, 0, 1.0),     # 4 blocks cached, branch off a node end
    ([1, 2, 5, 8], 60, 64, 100, 1.0),          # 3 cached, partial last block
    ([1, 2, 9], 48, 16, 100, 2.0),             # 2 cached, new branch at [1, 2]
    ([30, 31, 32], 48, 128, 200, 2.0),         # nothing cached: first short match
    ([30, 31, 33], 48, 16, 300, 3.0),          # shares 32 tokens with the one above: duplicate
    ([10, 11, 40], 48, 16, 300, 3.0),          # match ends inside [10, 11, 12]: split
    ([1, 2, 3, 50], 48, 128, 400, 4.0),        # match ends inside [3, 4]: split
    ([60], 10, 64, 400, 4.0),                  # 10 tokens: too short to be a duplicate
    ([30, 31, 33], 48, 64, 500, 5.0),          # duplicate again
    ([20, 21], 32, 16, 500, 5.0),              # fully cached: 31 matched (last token recomputed)
    ([20, 21, 70], 48, 128, 600, 6.0),         # 32 cached (short) and a duplicate of the above
    ([1, 2, 3, 4, 7, 80], 90, 16, 600, 6.0),   # deepest match
]
PROCESSED_TOKENS = 1000


def tokens(blocks: list[int], n: int) -> list[int]:
    out: list[int] = []
    for i, b in enumerate(blocks):
        out += [b * BS + j for j in range(min(BS, n - i * BS))]
    assert len(out) == n
    return out


def block_tokens(blocks: list[int]) -> int:
    """Cached sequences are whole blocks."""
    return len(blocks) * BS


@pytest.fixture(scope="module", autouse=True)
def published():
    reset_context()
    publish(ServerArgs(model_path="dummy", device="cpu"), role="test",
            ranks=SpawnRanks(world_rank=0, dp_rank=None))
    yield
    reset_context()


def sglang_order(policy: str) -> list[str]:
    tree = RadixCache.create_simulated()
    for blocks in CACHED:
        ids = tokens(blocks, block_tokens(blocks))
        tree.insert(InsertParams(key=RadixKey(array("q", ids)), value=torch.zeros(len(ids), dtype=torch.int64)))
    queue = []
    for i, (blocks, n, max_new, processed, entry) in enumerate(WAITING):
        r = Req(rid=f"r{i:02d}", origin_input_text="", origin_input_ids=array("q", tokens(blocks, n)),
                sampling_params=SamplingParams(temperature=0, max_new_tokens=max_new))
        r.arrival_processed_tokens = processed
        r.time_stats.wait_queue_entry_time = entry
        queue.append(r)
    SchedulePolicy(policy, tree, False, False, False).calc_priority(
        queue, None, processed_tokens=PROCESSED_TOKENS)
    return [r.rid for r in queue]


def simulator_order(policy) -> tuple[list[str], WaitingQueue]:
    cache = PrefixCache(BS, LruPolicy())
    queue = WaitingQueue(cache, policy)
    cache.touch_waiting = queue.touch_every_pass
    for blocks in CACHED:
        cache.insert(array("q", blocks), block_tokens(blocks), now=0.0)
    for i, (blocks, n, max_new, processed, entry) in enumerate(WAITING):
        r = SimRequest(TraceRequest(rid=f"r{i:02d}", arrival_s=entry, input_tokens=n,
                                    output_tokens=max_new, block_ids=array("q", blocks)), entry)
        r.seq, r.queue_time, r.arrival_processed_tokens = i, entry, processed
        queue.append(r)
    queue.sort(now=10.0, processed_tokens=PROCESSED_TOKENS, num_running=0)
    return [r.rid for r in queue.items], queue


POLICIES = [
    ("fcfs", FcfsPolicy()),
    ("lof", LofPolicy()),
    ("lpm", LpmPolicy()),
    ("hrrn", HrrnPolicy()),
    ("shortest-prefill-first", ShortestPrefillFirstPolicy()),
    ("dfs-weight", DfsWeightPolicy()),
]


@pytest.mark.parametrize("name,policy", POLICIES, ids=[p[0] for p in POLICIES])
def test_simulator_and_sglang_order_the_queue_identically(name, policy):
    ours, queue = simulator_order(policy)
    assert ours == sglang_order(name)
    if name != "fcfs":
        assert ours != sorted(ours), "the scenario should make the policy reorder the queue"


def test_the_scenario_exercises_duplicates_partial_matches_and_full_hits():
    _, queue = simulator_order(LpmPolicy())
    views = {r.rid: r.make_view() for r in queue.items}
    assert sorted(rid for rid, v in views.items() if v.in_batch_duplicate) == ["r04", "r08", "r10"]
    assert views["r09"].num_cached_tokens == 31  # fully cached prompt: last token recomputed
    assert views["r05"].num_cached_tokens == 32  # a match ending inside a cached run
    assert views["r11"].num_cached_tokens == 80


def test_views_match_what_the_sglang_adapter_reports():
    """Field by field against ``server.sglang.scheduling.views.request_view`` on the same requests."""
    from server.sglang.scheduling.state import state_of
    from server.sglang.scheduling.views import request_view

    tree = RadixCache.create_simulated()
    for blocks in CACHED:
        ids = tokens(blocks, block_tokens(blocks))
        tree.insert(InsertParams(key=RadixKey(array("q", ids)), value=torch.zeros(len(ids), dtype=torch.int64)))
    reqs = []
    for i, (blocks, n, max_new, processed, entry) in enumerate(WAITING):
        r = Req(rid=f"r{i:02d}", origin_input_text="", origin_input_ids=array("q", tokens(blocks, n)),
                sampling_params=SamplingParams(temperature=0, max_new_tokens=max_new))
        r.arrival_processed_tokens = processed
        r.time_stats.wait_queue_entry_time = entry
        state_of(r).arrival_seq = i
        reqs.append(r)
    policy = SchedulePolicy("lpm", tree, False, False, False)
    duplicates = policy._compute_prefix_matches(reqs, policy.policy)
    theirs = {r.rid: request_view(r) for r in reqs}
    _, queue = simulator_order(LpmPolicy())
    for r in queue.items:
        ours = r.make_view()
        for field in ("rid", "arrival_seq", "arrival_time", "num_input_tokens", "num_cached_tokens",
                      "max_new_tokens", "num_output_tokens"):
            assert getattr(ours, field) == getattr(theirs[r.rid], field), (r.rid, field)
        # SGLang's in-batch prefix rule (the server runs it natively for lpm)
        assert ours.in_batch_duplicate == (r.rid in duplicates), r.rid
        # NOTE: the adapter stamps its own token clock on arrival (not SGLang's
        # req.arrival_processed_tokens), so this one is checked against the scenario.
        assert ours.arrival_processed_tokens == WAITING[int(r.rid[1:])][3]
