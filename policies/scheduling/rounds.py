"""Scheduling a diffusion LM: who gets a block in each round.

A diffusion LM (SGLang's dLLM path: SDAR, LLaDA2) works on one block of
``block_size`` positions per request per scheduler round. A prompt block is
prefilled in one round; a generation block starts fully masked and takes one
round per denoising step until its last mask is confirmed (first done, first
out: a block takes 2 to ``masks + 1`` rounds). A prompt block and a denoising
step are the same forward over one block, so they cost the same and can share
a round.

Contract (the host's side), for a policy whose ``needs.rounds`` is set
(``RoundsNeeds``) and that is no SGLang built-in (``needs.sglang_native``):
  * Once per round the host calls ``policy.order_round(view)`` (``RoundsPolicy``)
    with every unfinished request, waiting or admitted, each a
    ``RoundRequestView``: what any order sees of it and its block-round
    progress (``DllmView``).
  * It walks the order. An admitted request gets one block. A waiting request
    is admitted first when one of the ``rounds.slots`` slots is free; when
    none is, it is passed over (a full set of slots does not end the walk).
    The walk ends when the round holds ``rounds.round_blocks`` blocks, or
    at the first block the KV pool cannot take.
  * A request passed over keeps its slot, its KV and its partly denoised
    block; nothing is preempted.

Contract (the policy's side): the same as for an autoregressive queue (a
permutation of the rids, deterministic, ties broken by ``arrival_seq``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from policies.scheduling import OrderDecision, SchedulingNeeds, SchedulingOption, SchedulingPolicy, check_rids
from policies.views import DllmView, RequestView


@dataclass(frozen=True, slots=True)
class RoundRequestView:
    """One unfinished request of a diffusion LM at a round."""

    request: RequestView
    """What any order sees of it (its prompt, output so far, arrival, features)."""
    progress: DllmView
    """Its progress in block rounds, as the host counts it now."""

    @property
    def rid(self) -> str:
        return self.request.rid

    @property
    def arrival_seq(self) -> int:
        return self.request.arrival_seq


@dataclass(frozen=True, slots=True)
class RoundView:
    """Every unfinished request at one round: admitted ones first, then waiting
    ones, each group in the host's order."""

    requests: tuple[RoundRequestView, ...]
    now: float = 0.0
    """Host time of this round, in seconds."""
    num_admitted: int = 0
    """Requests holding a slot."""


@runtime_checkable
class RoundsPolicy(Protocol):
    """Orders a diffusion LM's block rounds (see module docs)."""

    needs: SchedulingNeeds
    """What the policy needs from its host; ``needs.rounds`` is set."""

    def order_round(self, view: RoundView) -> OrderDecision:
        """Return every unfinished request's rid, best first."""
        ...


def check_round(view: RoundView, decision: OrderDecision) -> None:
    """Raise ``ValueError`` unless ``decision`` is a permutation of the round's rids.

    NOTE: hosts call this on every round's decision (``check_permutation``'s twin)."""
    check_rids([r.rid for r in view.requests], decision)


def missing_face(policy: SchedulingOption) -> str | None:
    """The face ``policy.needs`` promise that ``policy`` lacks, or ``None``.

    NOTE: ``needs.queue`` promises ``order`` (``SchedulingPolicy``); ``needs.rounds``
    promises ``order_round`` (``RoundsPolicy``) unless SGLang runs its own
    rounds (``sglang_native``). ``compose.specs.build_policy`` checks it for every
    host (the kind's ``faces``)."""
    needs = policy.needs
    if needs.queue and not isinstance(policy, SchedulingPolicy):
        return "order (an autoregressive model's prefill queue)"
    if needs.rounds is not None and needs.sglang_native is None and not isinstance(policy, RoundsPolicy):
        return "order_round (a diffusion LM's block rounds)"
    return None


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
    scheduler and the simulator's): the order's ``rounds.slots`` or the host's
    slots; its ``rounds.round_blocks`` or one block per slot. SGLang's own order
    (``sglang_native``) keeps the host's slots and budget."""
    rounds = needs.rounds
    if needs.sglang_native is not None or rounds is None:
        return max_running_requests, max_running_requests
    slots = rounds.slots or max_running_requests
    return slots, rounds.round_blocks or slots
