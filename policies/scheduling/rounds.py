"""Scheduling a diffusion LM: who gets a block in each round.

A diffusion LM (SGLang's dLLM path: SDAR, LLaDA2) works on one block of
``block_size`` positions per request per scheduler round. A prompt block is
prefilled in one round; a generation block starts fully masked and takes one
round per denoising step until its last mask is confirmed (first done, first
out: a block takes 2 to ``masks + 1`` rounds). A prompt block and a denoising
step are the same forward over one block, so they cost the same and can share
a round.

Contract (the host's side), for a policy whose ``needs.diffusion`` is set:
  * Once per round the host calls ``policy.order(queue)`` with every unfinished
    request, waiting or admitted, each with ``RequestView.dllm`` set.
  * It walks the order. An admitted request gets one block. A waiting request
    is admitted first when one of the ``needs.dllm_slots`` slots is free; when
    none is, it is passed over (a full set of slots does not end the walk).
    The walk ends when the round holds ``needs.dllm_round_blocks`` blocks, or
    at the first block the KV pool cannot take.
  * A request passed over keeps its slot, its KV and its partly denoised
    block; nothing is preempted.

Contract (the policy's side): the same as for an autoregressive queue (a
permutation of the rids, deterministic, ties broken by ``arrival_seq``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from policies.views import DllmView, RequestView

if TYPE_CHECKING:
    from policies.scheduling import SchedulingNeeds


def blocks_left(request: RequestView, dllm: DllmView) -> int:
    """Generation blocks the request can still need, at most (``>= 1``): the
    blocks its prompt plus ``max_new_tokens`` reach, less the whole blocks
    already committed.

    NOTE: generation starts in the prompt's partial last block (its masks fill
    the rest of that block), so counting blocks of ``max_new_tokens`` alone is
    one block short whenever the prompt is not block-aligned."""
    prompt = request.num_input_tokens - request.num_output_tokens
    end = math.ceil((prompt + request.max_new_tokens) / dllm.block_size)
    return max(1, end - (prompt + request.num_output_tokens) // dllm.block_size)


def denoise_rounds_bound(request: RequestView, dllm: DllmView) -> int:
    """The most denoising rounds the request can still take when every step
    confirms at least one position: ``block_size + 1`` per block left.

    NOTE: an upper bound for confidence-threshold algorithms (SGLang's
    ``LowConfidence`` unmasks at least one position per step); an estimate
    above it is never right."""
    return blocks_left(request, dllm) * (dllm.block_size + 1)


def round_shape(needs: SchedulingNeeds, max_running_requests: int) -> tuple[int, int]:
    """``(slots, blocks per round)`` of a diffusion host serving an order with ``needs``,
    whose own request slots are ``max_running_requests``.

    NOTE: the one statement of the rule both hosts follow (the server's round
    scheduler and the simulator's): the order's ``dllm_slots`` or the host's
    slots; its ``dllm_round_blocks`` or one block per slot. SGLang's own order
    (``sglang_native``) keeps the host's slots and budget."""
    if needs.sglang_native is not None:
        return max_running_requests, max_running_requests
    slots = needs.dllm_slots or max_running_requests
    return slots, needs.dllm_round_blocks or slots
