"""Time to order the waiting queue per scheduling step: SGLang's own cache-aware orders
vs Switchboard's seam with Fairway, on SGLang 0.5.23's default (Rust) radix tree.

    python -m bench.scripts.order_overhead [--sizes 128 1000 10000] [--evict-sizes 1000 10000] [--out bench/results/order_overhead.md]

Workload (realistic prefix sharing, seeded): a 1,500-token system prompt shared
by every request; conversation sessions whose histories (500-8,000 tokens) are
already cached; 80% of waiting requests continue a session (its cached history
plus 50-1,000 new tokens), 20% start one (system prompt plus 200-4,000 new
tokens). Steady state: each step the first ``admit`` requests of the order are
prefilled (their prompts inserted into the tree, as the PrefillAdder and the
cache would) and as many new ones arrive; the time of ``calc_priority`` alone is
measured, after one warm-up step. Each order runs on its own identical copy of
the tree and queue, in one process.

The seam is told the head the PrefillAdder can reach, as the server tells it:
SGLang's default ``max_prefill_tokens`` (16,384) and no request-count bound
(the server also bounds it by ``get_num_allocatable_reqs``, usually far
lower with a full running batch). Without evictions the head re-check
re-matches nothing; ``--evict-sizes`` adds rows where the tree evicts
``EVICT_TOKENS`` (LRU) every step, so the seam re-matches the head of its
order (up to 16 requests) every step, as under memory pressure. Hashing the step's inserts (the tracker's hook
in ``tree_cache.insert``) is charged to the seam's time.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

from server.sglang.launch.stub import install_sgl_kernel_stub

install_sgl_kernel_stub()  # NOTE: before SGLang is imported (no libcuda here)

from array import array

import numpy as np
import torch
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.managers.schedule_policy import SchedulePolicy
from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.mem_cache.unified_cache.components import ComponentType
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
from sglang.srt.runtime_context import SpawnRanks, publish, reset_context
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.server_args import ServerArgs

from bench.scripts.common import git_commit
from bench.traces.paths import REPO_ROOT
from policies.scheduling import SchedulingPolicy
from policies.scheduling.fairway import FairwayPolicy
from policies.scheduling.leap import LeapPolicy
from server.sglang.scheduling.matching import chained_hashes
from server.sglang.scheduling.ordering import SwitchboardSchedulePolicy

SYSTEM_TOKENS = 1500
TARGET = 0.05
ADMIT_PER_STEP = 4
MAX_PREFILL_TOKENS = 16384  # SGLang's default --max-prefill-tokens
EVICT_TOKENS = 2048

#: Builds one queue order over the workload's tree (SGLang's classes are untyped: ``Any``).
MakeOrder = Callable[[UnifiedRadixCache], SchedulePolicy]


class _NoReuseAllocator(TokenToKVPoolAllocator):
    """Slots are never handed out twice, so freeing is a no-op.

    NOTE: the pool is sized for every token the benchmark inserts; SGLang's
    ``free`` concatenates onto the whole free list (O(pool) per call), which
    made building a 10k-request workload quadratic. Only tree contents matter
    to the measured ``calc_priority``.
    """

    def free(self, free_index: torch.Tensor) -> None:
        return None


class Workload:
    """A seeded tree + waiting queue + arrival stream (see module docs)."""

    def __init__(self, n_waiting: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self._np = np.random.default_rng(seed)  # NOTE: token ids in bulk (10k queues hold ~50M)
        self.system = self._tokens(SYSTEM_TOKENS)
        n_sessions = max(64, n_waiting // 4)
        self.histories = [self.system + self._tokens(self.rng.randint(500, 8000)) for _ in range(n_sessions)]
        total = sum(len(h) for h in self.histories) + 4 * n_waiting * 1000 + 10 ** 6
        self.allocator = _NoReuseAllocator(total, torch.float32, "cpu", None, False)
        params = CacheInitParams(disable=False, page_size=1, token_to_kv_pool_allocator=self.allocator,
                                 req_to_token_pool=ReqToTokenPool(8, 64, "cpu", False),
                                 tree_components=(ComponentType.FULL,))
        self.tree = UnifiedRadixCache(params)
        for h in self.histories:
            self.insert(h)
        self.count = 0
        self.queue = [self.new_request() for _ in range(n_waiting)]

    def _tokens(self, n: int) -> list[int]:
        # NOTE: tolist() of an integer array gives Python ints (numpy types it Any).
        return cast(list[int], self._np.integers(100, 40_000, n).tolist())

    def insert(self, ids: list[int]) -> None:
        kv = self.allocator.alloc(len(ids))
        self.tree.insert(InsertParams(key=RadixKey(array("q", ids)), value=kv))

    def new_request(self) -> Req:
        if self.rng.random() < 0.8:
            ids = self.rng.choice(self.histories) + self._tokens(self.rng.randint(50, 1000))
        else:
            ids = self.system + self._tokens(self.rng.randint(200, 4000))
        self.count += 1
        req = Req(rid=f"r{self.count}", origin_input_text="", origin_input_ids=array("q", ids),
                  sampling_params=SamplingParams(temperature=0, max_new_tokens=128))
        req.arrival_processed_tokens = 0
        return req

    def step(self, evict_tokens: int = 0) -> None:
        """The head is prefilled (its prompt joins the tree), as many new requests arrive."""
        if evict_tokens:
            self.tree.evict(EvictParams(num_tokens=evict_tokens))
        for req in self.queue[:ADMIT_PER_STEP]:
            self.insert(list(req.origin_input_ids))
        self.queue = self.queue[ADMIT_PER_STEP:] + [self.new_request() for _ in range(ADMIT_PER_STEP)]


def sglang_order(name: str) -> MakeOrder:
    def make(tree: UnifiedRadixCache) -> SchedulePolicy:
        return SchedulePolicy(name, tree, False, False, False)
    return make


def seam_order(make_policy: Callable[[], SchedulingPolicy]) -> MakeOrder:
    """A pure policy through Switchboard's seam, as the server runs it (config defaults).

    NOTE: LEAP's queued requests carry no features here (all ranked at its prior).
    """
    def make(tree: UnifiedRadixCache) -> SchedulePolicy:
        return SwitchboardSchedulePolicy("fcfs", tree, False, False, False, order=make_policy(),
                                         prefill_clock=lambda: 0,
                                         head_bounds=lambda running: (None, float(MAX_PREFILL_TOKENS)))
    return make


ORDERS = {"sglang shortest-prefill-first": sglang_order("shortest-prefill-first"),
          "sglang lpm": sglang_order("lpm"), "sglang hrrn": sglang_order("hrrn"),
          # NOTE: FairwayPolicy satisfies SchedulingPolicy at run time; mypy refuses it only because it
          # declares `needs` as a ClassVar where the Protocol (policies/scheduling) declares an instance attribute.
          "switchboard fairway": seam_order(FairwayPolicy),  # type: ignore[arg-type]
          "switchboard leap": seam_order(LeapPolicy)}


def measure(n: int, make: MakeOrder, steps: int, seed: int, evict_tokens: int = 0) -> float:
    """Mean milliseconds of one ``calc_priority`` in steady state."""
    w = Workload(n, seed)
    policy = make(w.tree)
    # NOTE: only Switchboard's seam keeps a match tracker (SGLang's own orders have none)
    tracker = policy.tracker if isinstance(policy, SwitchboardSchedulePolicy) else None
    times = []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        policy.calc_priority(w.queue, None, processed_tokens=i * 1000)
        if tracker is not None:
            # NOTE: the tracker hashes every sequence the tree inserts (in the
            # scheduler's cache path, outside calc_priority); charged here.
            for req in w.queue[:ADMIT_PER_STEP]:
                chained_hashes(req.origin_input_ids, tracker.block, 0)
        if i:
            times.append((time.perf_counter() - t0) * 1e3)
        w.step(evict_tokens)
    return statistics.mean(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[128, 1000, 10000])
    ap.add_argument("--evict-sizes", type=int, nargs="*", default=[1000, 10000])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results" / "order_overhead.md")
    args = ap.parse_args()
    commit = git_commit()  # NOTE: stamps the run before any work
    torch.set_num_threads(1)
    reset_context()
    publish(ServerArgs(model_path="dummy", device="cpu"), role="bench",
            ranks=SpawnRanks(world_rank=0, dp_rank=None))
    rows: dict[str, dict[str, float]] = {}
    cases = [(n, 0) for n in args.sizes] + [(n, EVICT_TOKENS) for n in args.evict_sizes]
    for n, evict in cases:
        label = f"{n:,}" + (f" (evicting {evict:,}/step)" if evict else "")
        rows[label] = {name: measure(n, make, args.steps, seed=n, evict_tokens=evict)
                       for name, make in ORDERS.items()}
        print(label, {k: round(v, 2) for k, v in rows[label].items()}, flush=True)
    Path("results/order_overhead").mkdir(parents=True, exist_ok=True)
    Path("results/order_overhead/latest.json").write_text(json.dumps(rows, indent=1))
    args.out.write_text(render(rows, args.steps, commit))
    print(f"wrote {args.out}")


def render(rows: dict[str, dict[str, float]], steps: int, commit: str) -> str:
    names = list(ORDERS)
    lines = ["# Queue-ordering overhead per scheduling step", "",
             f"`python -m bench.scripts.order_overhead` at commit {commit} ({datetime.now(UTC):%Y-%m-%d}): mean "
             f"milliseconds of `calc_priority` over {steps} steady-state steps, one process, one thread, "
             "SGLang 0.5.23's default Rust radix tree, on a 2-core CPU machine. SGLang's `lpm` and `hrrn` "
             "silently order FCFS above 128 waiting requests (their times there are the fallback's); "
             "`shortest-prefill-first`, Fairway and LEAP order every queue length. Switchboard's seam keeps "
             "the queue as columns across steps (`server/sglang/scheduling/queue_columns.py`), hits via `MatchTracker`, "
             "and is told SGLang's default prefill token budget (16,384) as the head bound; "
             "new arrivals (4 per step) are hashed and matched inside the timed call, and hashing the step's "
             "inserts (the tracker's insert hook) is charged to Fairway's time. LEAP's order reads no cache "
             "hits (`SchedulingNeeds(cache_hits=False)`), so its seam matches nothing.", "",
             "| waiting | " + " | ".join(names) + " | fairway / SPF | leap / SPF |",
             "|---|" + "---|" * (len(names) + 2)]
    for n, row in rows.items():
        spf = row["sglang shortest-prefill-first"]
        ratios = f"{row['switchboard fairway'] / spf:.3f} | {row['switchboard leap'] / spf:.3f}"
        lines.append(f"| {n} | " + " | ".join(f"{row[k]:.2f}" for k in names) + f" | {ratios} |")
    lines += ["", f"Target (issue 4): <= {TARGET} x SGLang's `shortest-prefill-first` at 1k and 10k "
              "waiting requests, with no fallback at any queue length."]
    return "\n".join(lines + [""])


if __name__ == "__main__":
    main()
