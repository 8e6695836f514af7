"""With an infinite cache and FCFS the simulator reaches the ideal prefix hit ratio.

The ideal ratio (data/README.md) replays requests in arrival order into an
infinite cache of ``hash_ids`` blocks. The simulator matches the same: with a
pool that never evicts and one request per prefill batch (SGLang's
``--prefill-max-requests 1``), every request is matched after all earlier ones
were cached. The one difference is SGLang's: a fully cached prompt still
computes its last token, so its hit is ``input - 1``.
"""

from __future__ import annotations

import json

import pytest

from bench.config import compose_bench, resolve_bench
from bench.metrics import Slo, summarize
from bench.sim import CostModel, SimParts, SimSettings, build_simulator, records_of
from bench.traces import load_trace
from bench.traces.paths import default_data_root
from tests.data import needs_data

MOONCAKE = default_data_root() / "mooncake" / "conversation_trace.jsonl"
pytestmark = needs_data(MOONCAKE)

WINDOW_S = 900.0


def ideal(rows, block_size=512):
    """(block hit ratio, token-weighted ratio, capped hit tokens) from raw rows."""
    seen: set[int] = set()
    blocks = hit_blocks = tokens = hit_tokens = capped = 0
    for row in rows:
        n, ids = row["input_length"], row["hash_ids"]
        own = 0
        for i, b in enumerate(ids):
            size = min(block_size, n - i * block_size)
            blocks += 1
            tokens += size
            if b in seen:
                hit_blocks += 1
                hit_tokens += size
                own += size
        seen.update(ids)
        capped += min(own, n - 1)
    return hit_blocks / blocks, hit_tokens / tokens, capped, tokens


def test_infinite_cache_fcfs_reaches_the_ideal_ratio():
    rows = [json.loads(line) for line in MOONCAKE.open()]
    rows = [r for r in rows if r["timestamp"] / 1000.0 < WINDOW_S]
    _, token_ratio, capped, total = ideal(rows)

    s = resolve_bench(compose_bench([
        f"trace.window_end_s={WINDOW_S}", "+policy=fcfs", "sim.max_total_tokens=1000000000000",
        "sim.prefill_max_requests=1"]))
    trace = load_trace(s.trace, s.data_root)
    assert len(trace.requests) == len(rows)
    cost = CostModel(s.accelerator, s.model_profile)
    sim = build_simulator(trace, cost, SimSettings.resolve(s.sim, s.accelerator, s.model_profile, cost),
                          SimParts(order=s.build("policy")))
    sim.run()
    records = records_of(sim, with_token_times=False)
    assert all(r.status == "finished" for r in records)
    assert sim.cache.num_evicted_tokens == 0
    assert sum(r.cached_tokens for r in records) == capped
    assert sum(r.input_tokens for r in records) == total
    rate = summarize(records, Slo(1, 1))["prefix_hit_rate"]
    assert rate == pytest.approx(capped / total, abs=1e-12)
    assert rate == pytest.approx(token_ratio, abs=2e-4)  # only the recomputed last tokens differ
