"""From bench settings to a dLLM simulation, and from a simulation to records.

``sim.dllm.*`` (``bench.schema.DllmSimConfig``) picks the block size, the
per-block rounds model and the round cost; the slots and round capacity come
from the policy (``needs.rounds``: ``slots``, ``round_blocks``; the server
sets SGLang's ``max_running_requests`` to the slots) or, for SGLang's own
scheduling, from ``sim.max_running_requests`` (null = 1, SGLang's dLLM
default; capacity = slots).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np

from bench.metrics import RequestRecord, Timeline
from bench.schema import DllmRoundCost, DllmRounds, DllmSimConfig
from bench.sim.cost import CostModel
from bench.sim.dllm.blocks import Confidence, RoundsModel, Table, TinyLive
from bench.sim.dllm.cost import LinearRoundCost, RooflineRoundCost, RoundCost
from bench.sim.dllm.engine import DllmParams, DllmSimulator
from bench.sim.dllm.oracle import OracleDwise
from bench.traces.trace import Trace
from policies.scheduling import SchedulingOption
from policies.scheduling.dwise import DwisePolicy
from policies.scheduling.rounds import round_shape


def rounds_model(cfg: DllmSimConfig) -> RoundsModel:
    """The per-block rounds model ``sim.dllm.rounds_per_block`` names."""
    kind = DllmRounds(cfg.rounds_per_block)
    if kind is DllmRounds.tiny_live:
        return TinyLive()
    if kind is DllmRounds.confidence:
        return Confidence(cfg.confidence)
    return Table(cfg.rounds_table, cfg.block_size)


def round_cost(cfg: DllmSimConfig, cost: CostModel) -> RoundCost:
    """The round cost ``sim.dllm.round_cost`` names."""
    if DllmRoundCost(cfg.round_cost) is DllmRoundCost.cpu_tiny:
        return LinearRoundCost(cfg.round_base_s, cfg.round_block_s)
    return RooflineRoundCost(cost, cfg.block_size)


def slots_of(policy: SchedulingOption | None, max_running_requests: int | None) -> tuple[int, int]:
    """``(slots, round_blocks)`` for a run (module docs)."""
    base = 1 if max_running_requests is None else max_running_requests
    return (base, base) if policy is None else round_shape(policy.needs, base)


def oracle_of(policy: SchedulingOption | None) -> OracleDwise:
    """The bench-only oracle twin of a DWISE policy: its slots, capacity and aging."""
    # NOTE: the oracle is DWISE with the true work left (``OracleDwise``): it needs DWISE's own aging bound
    if not isinstance(policy, DwisePolicy):
        raise ValueError("sim.dllm.oracle needs +policy=dwise (it keeps DWISE's slots and aging)")
    slots, blocks = slots_of(policy, None)
    return OracleDwise(slots, blocks, policy.max_wait_rounds)


def params_of(cfg: DllmSimConfig, cost: CostModel, policy: SchedulingOption | None,
              max_running_requests: int | None) -> DllmParams:
    slots, blocks = slots_of(policy, max_running_requests)
    return DllmParams(block_size=cfg.block_size, slots=slots, round_blocks=blocks, rounds=rounds_model(cfg),
                      cost=round_cost(cfg, cost), max_new_tokens=cfg.max_new_tokens, seed=cfg.seed)


class DllmSampler:
    """Waiting and admitted requests, and the KV they hold, every ``dt`` simulated seconds."""

    def __init__(self, dt: float) -> None:
        self.dt = dt
        self._next = 0.0
        self.rows: list[tuple[float, int, int, int]] = []

    def __call__(self, sim: DllmSimulator) -> None:
        if sim.now < self._next:
            return
        self._next = sim.now + self.dt
        held = sum(r.context_tokens + sim.p.block_size for r in sim.admitted.values())
        self.rows.append((sim.now, len(sim.waiting), len(sim.admitted), held))

    def timeline(self, capacity: int) -> Timeline:
        rows = np.array(self.rows, dtype=np.float64).reshape(-1, 4)
        return Timeline(t=rows[:, 0].copy(), waiting=rows[:, 1].astype(int), running=rows[:, 2].astype(int),
                        kv_used=rows[:, 3].astype(np.int64), kv_cached=np.zeros(len(rows), dtype=np.int64),
                        capacity=capacity)


def records_of(sim: DllmSimulator) -> list[RequestRecord]:
    """One record per request, in arrival order: TTFT = the first generation
    block's end, E2E = the last block's end (no per-token times: a block's
    tokens arrive together)."""
    out = []
    for r in sorted(sim.requests.values(), key=lambda r: (r.arrival_s, r.seq)):
        out.append(RequestRecord(
            rid=r.rid, arrival_s=r.arrival_s, status="finished" if r.finished else "unserved",
            input_tokens=r.prompt_tokens, output_tokens=r.output_tokens, cached_tokens=0,
            prefill_tokens=r.prompt_tokens, first_token_s=r.first_token_s, finish_s=r.finish_s,
            session_id=r.trace.session_id))
    return out


def run_meta(sim: DllmSimulator, order: str, cfg: DllmSimConfig) -> dict[str, Any]:
    """What a dLLM run reports beside its records (``meta`` of the results)."""
    sizes = np.frombuffer(sim.round_sizes, dtype=np.int32)
    prompt = np.frombuffer(sim.round_prompt_blocks, dtype=np.int32)
    return {
        "dllm": {**asdict(cfg), "rounds_per_block": DllmRounds(cfg.rounds_per_block).value,
                 "round_cost": DllmRoundCost(cfg.round_cost).value},
        "order": order, "slots": sim.p.slots, "round_blocks": sim.p.round_blocks,
        "rounds": sim.round, "blocks": int(sizes.sum()), "simulated_s": sim.now,
        "mean_blocks_per_round": float(sizes.mean()) if len(sizes) else 0.0,
        "prompt_only_rounds": int(((prompt == sizes) & (sizes > 0)).sum()),
        "shared_rounds": int(((prompt > 0) & (prompt < sizes)).sum()),
        "kv": "tokens held by admitted requests; the dLLM simulator has no KV or context limit",
        "prefix_cache": "ignored (no prompt block is ever cached)",
    }


def simulate(trace: Trace, cfg: DllmSimConfig, cost: CostModel, policy: SchedulingOption | None,
             max_running_requests: int | None, timeline_dt_s: float = 1.0, capacity: int = 1,
             on_final: Any = None) -> tuple[list[RequestRecord], Timeline, dict[str, Any], DllmSimulator]:
    """Run ``trace`` in dLLM mode under ``policy`` (``None``: SGLang's own
    scheduling; with ``cfg.oracle`` the bench-only oracle twin of the DWISE
    ``policy``)."""
    order = "sglang" if policy is None or policy.needs.sglang_native is not None else type(policy).__name__
    if cfg.oracle:
        policy, order = oracle_of(policy), "oracle (true remaining rounds; bench-only)"
    sim = DllmSimulator(trace, params_of(cfg, cost, policy, max_running_requests), policy)
    sampler = DllmSampler(timeline_dt_s)
    sim.on_round, sim.on_final = sampler, on_final
    sim.run()
    return records_of(sim), sampler.timeline(capacity), run_meta(sim, order, cfg), sim
