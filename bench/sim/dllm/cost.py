"""Seconds per dLLM round, from the blocks the round runs.

A prompt block and a denoising step are the same forward over ``B`` positions
(``DLLM_EXTEND``; docs/dwise-notes.md §3.2), so a round's cost depends only on
its blocks (and, for the roofline, each block's context), never on their kind.

============ ==================================================================
profile      based on
============ ==================================================================
``cpu_tiny`` measured (docs/dwise-notes.md §3.2, probe round times on the tiny
             random SDAR, fp32, one thread, shared CPU): medians 29 / 56 / 98 ms
             for 1 / 2 / 3 requests, about linear, ~30 ms per block (the
             151,680-row LM head and torch-native attention's per-sequence loop
             dominate). Default ``base 0 + 0.030 s x blocks``. Noisy upper bounds.
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

from bench.sim.cost import CostModel

#: ``cpu_tiny``: seconds per block (linear fit through the origin of §3.2's medians: 31 ms; rounded).
CPU_TINY_BLOCK_S = 0.030


class RoundCost(Protocol):
    """Seconds one round takes."""

    def round_time(self, contexts: Sequence[int]) -> float:
        """A round of ``len(contexts)`` blocks, block ``i`` over ``contexts[i]`` earlier tokens."""
        ...


class LinearRoundCost:
    """``base_s + block_s * blocks`` (the ``cpu_tiny`` profile's form)."""

    def __init__(self, base_s: float = 0.0, block_s: float = CPU_TINY_BLOCK_S) -> None:
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
