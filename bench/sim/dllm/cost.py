"""Seconds per dLLM round, from the blocks the round runs.

A prompt block and a denoising step are the same forward over ``B`` positions
(``DLLM_EXTEND``; docs/dwise-notes.md §3.2), so a round's cost depends only on
its blocks (and, for the roofline, each block's context), never on their kind.

============ ==================================================================
profile      based on
============ ==================================================================
``cpu_tiny`` measured on the tiny random SDAR's CPU server (fp32, one
             thread): ``bench.scripts.dwise_live``'s probe on a quiet machine,
             13.1 ms + 3.3 ms per block (1 / 4 blocks: 15-17 / 24-27 ms over
             three runs), so most of a round is a fixed cost and a round of few
             blocks wastes part of it. Default ``0.013 + 0.0033 s x blocks``
             (``bench.schema.CPU_TINY_*``). The first probe (docs/dwise-notes.md
             §3.2, a busy shared machine) gave ~30 ms per block through 0.
``roofline`` an ASSUMPTION for a GPU: ``bench/sim/cost.py``'s roofline
             (``accelerator``, ``model_profile``) for one forward over the
             round's blocks, each ``B`` new tokens over its request's context.
             At a few blocks it is weight-streaming bound, so a round costs
             nearly the same for any block count up to the compute knee (H100 +
             Llama-3.1-8B: ~9 ms, flat to ~100 blocks of 4). Not measured for a
             dLLM; SDAR-8B is Qwen3-8B-shaped, close to the Llama-3.1-8B
             profile; the LM head is charged one row per block, not ``B``.
============ ==================================================================
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from bench.schema import CPU_TINY_BASE_S, CPU_TINY_BLOCK_S
from bench.sim.cost import CostModel


class RoundCost(Protocol):
    """Seconds one round takes."""

    def round_time(self, contexts: Sequence[int]) -> float:
        """A round of ``len(contexts)`` blocks, block ``i`` over ``contexts[i]`` earlier tokens."""
        ...


class LinearRoundCost:
    """``base_s + block_s * blocks`` (the ``cpu_tiny`` profile's form)."""

    def __init__(self, base_s: float = CPU_TINY_BASE_S, block_s: float = CPU_TINY_BLOCK_S) -> None:
        if base_s < 0 or block_s < 0 or base_s + block_s <= 0:
            raise ValueError("round cost needs base_s >= 0, block_s >= 0 and a positive round time")
        self.base_s = base_s
        self.block_s = block_s

    def round_time(self, contexts: Sequence[int]) -> float:
        return self.base_s + self.block_s * len(contexts)


class RooflineRoundCost:
    """One forward over the round's blocks on ``bench.sim.cost.CostModel`` (module docs)."""

    def __init__(self, model: CostModel, block_size: int) -> None:
        self.model = model
        self.block_size = block_size

    def round_time(self, contexts: Sequence[int]) -> float:
        return self.model.prefill_time([(self.block_size, c) for c in contexts])
