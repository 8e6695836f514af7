"""One diffusion-LM request: its block plan, its hidden truth, what the host sees.

Block plan (SGLang 0.5.23, FDFO; docs/dwise-notes.md §3.1), for a prompt of
``P`` tokens, ``N`` output tokens and block size ``B``:

* prompt blocks ``floor(P/B) - C`` (``C``: whole prompt blocks already in the
  prefix cache; the simulator ignores prefix caching, so ``C = 0``), one round
  each; the partial last prompt block (``P mod B`` tokens) is not prefilled,
  it is the start of the first generation block;
* generation blocks ``1 + ceil(max(0, N - m)/B)`` with ``m = B - P mod B``
  masks in the first one and ``B`` in each later one;
* a generation block with ``k`` masks takes one round per denoising step and
  one more that confirms it (FDFO reports ``done`` before its step): its
  trajectory of masks left at the start of each round ends with ``0``.

The truth (every block's trajectory, hence the total denoising rounds) is
drawn once, when the request arrives; policies see only the host-visible
counters (``host_view``), never the trajectories.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bench.traces.trace import TraceRequest
from policies.scheduling.rounds import RoundRequestView
from policies.views import DllmView, RequestView


@dataclass(frozen=True, slots=True)
class BlockPlan:
    """How a request splits into prompt and generation blocks."""

    prompt_blocks: int
    """Prompt blocks to prefill, one round each (uncached)."""
    first_masks: int
    """Masks of the first generation block (``m = B - P mod B``, 1..B)."""
    gen_blocks: int
    """Generation blocks (``1 + ceil(max(0, N - m)/B)``)."""


def block_plan(prompt_tokens: int, output_tokens: int, block_size: int, cached_blocks: int = 0) -> BlockPlan:
    """The block plan of a request (module docs)."""
    if prompt_tokens < 0 or output_tokens < 1 or block_size < 1:
        raise ValueError("need prompt_tokens >= 0, output_tokens >= 1 and block_size >= 1")
    full = prompt_tokens // block_size
    if not 0 <= cached_blocks <= full:
        raise ValueError(f"cached_blocks must be in [0, {full}], got {cached_blocks}")
    m = block_size - prompt_tokens % block_size
    return BlockPlan(full - cached_blocks, m, 1 + math.ceil(max(0, output_tokens - m) / block_size))


def tiny_live_rounds(prompt_tokens: int, output_tokens: int, block_size: int, cached_blocks: int = 0) -> int:
    """Total rounds of a request alone on the random tiny SDAR model (one mask
    per step): ``(floor(P/B) - C) + (m + 1) + (B + 1) * ceil(max(0, N - m)/B)``."""
    plan = block_plan(prompt_tokens, output_tokens, block_size, cached_blocks)
    return plan.prompt_blocks + plan.first_masks + 1 + (block_size + 1) * (plan.gen_blocks - 1)


class DllmRequest:
    """A request inside the dLLM simulator: truth plus host-visible counters."""

    __slots__ = ("trace", "rid", "seq", "arrival_s", "prompt_tokens", "output_tokens", "max_new_tokens",
                 "block_size", "plan", "trajectories", "true_denoise_rounds", "prompt_done", "block_index",
                 "round_in_block", "denoise_rounds", "rounds_run", "shared_rounds", "last_round",
                 "admitted", "first_token_s", "finish_s", "finish_round", "arrival_round",
                 "longest_pass_admitted", "_pass_run")

    def __init__(self, trace: TraceRequest, seq: int, arrival_s: float, output_tokens: int, max_new_tokens: int,
                 block_size: int, trajectories: tuple[tuple[int, ...], ...], arrival_round: int) -> None:
        self.trace = trace
        self.rid = trace.rid
        self.seq = seq
        self.arrival_s = arrival_s
        self.prompt_tokens = trace.input_tokens
        self.output_tokens = output_tokens
        """True output tokens (the request stops there: ignore_eos, or EOS under a larger cap)."""
        self.max_new_tokens = max_new_tokens
        """What the host knows of the output: the request's cap (``>= output_tokens``)."""
        self.block_size = block_size
        self.plan = block_plan(self.prompt_tokens, output_tokens, block_size)
        if len(trajectories) != self.plan.gen_blocks:
            raise ValueError(f"{self.rid}: {len(trajectories)} block trajectories for {self.plan.gen_blocks} blocks")
        self.trajectories = trajectories
        """Hidden: per generation block, the masks left at the start of each of its rounds."""
        self.true_denoise_rounds = sum(len(t) for t in trajectories)
        """Hidden: the denoising rounds the request will take in all."""
        # host-visible counters
        self.prompt_done = 0
        self.block_index = 0
        """Generation blocks finished."""
        self.round_in_block = 0
        """Rounds run on the current generation block."""
        self.denoise_rounds = 0
        self.rounds_run = 0
        self.shared_rounds = 0
        self.last_round = arrival_round
        """The round it last ran in, or the round count when it arrived (as the server counts)."""
        self.arrival_round = arrival_round
        self.admitted = False
        self.first_token_s: float | None = None
        self.finish_s: float | None = None
        self.finish_round: int | None = None
        self.longest_pass_admitted = 0
        """Most rounds in a row it held a slot without running (the aging bound's subject)."""
        self._pass_run = 0

    # ------------------------------------------------------------ host side
    @property
    def in_prompt(self) -> bool:
        """Still prefilling its prompt (SGLang ``is_dllm_prefill``)."""
        return self.prompt_done < self.plan.prompt_blocks

    @property
    def finished(self) -> bool:
        return self.finish_s is not None

    @property
    def masks_left(self) -> int:
        """Masks left in the current generation block as SGLang shows them:
        the partly denoised block's mask count, 0 before its first round."""
        if self.in_prompt or self.round_in_block == 0:
            return 0
        return self.trajectories[self.block_index][self.round_in_block]

    @property
    def output_committed(self) -> int:
        """Output tokens of the finished generation blocks (``len(output_ids)``)."""
        if self.block_index == 0:
            return 0
        return min(self.output_tokens, self.plan.first_masks + self.block_size * (self.block_index - 1))

    @property
    def context_tokens(self) -> int:
        """Tokens before the block it runs next (its KV)."""
        if self.in_prompt:
            return self.prompt_done * self.block_size
        return (self.prompt_tokens - self.prompt_tokens % self.block_size) + self.block_size * self.block_index

    def view(self, round_index: int) -> RoundRequestView:
        """What a round order sees (``policies.scheduling.rounds``)."""
        out = self.output_committed
        return RoundRequestView(
            RequestView(
                rid=self.rid, arrival_seq=self.seq, arrival_time=self.arrival_s,
                num_input_tokens=self.prompt_tokens + out, max_new_tokens=self.max_new_tokens,
                num_output_tokens=out, session_id=self.trace.session_id, priority=self.trace.priority),
            DllmView(
                block_size=self.block_size, prompt_blocks_left=self.plan.prompt_blocks - self.prompt_done,
                denoise_rounds=self.denoise_rounds, rounds_waited=max(0, round_index - self.last_round),
                admitted=self.admitted, masks_left=self.masks_left, rounds_run=self.rounds_run,
                shared_rounds=self.shared_rounds))

    def finished_dllm(self) -> DllmView:
        """The final counts a finished request reports (``FinishedView.dllm``)."""
        return DllmView(block_size=self.block_size, prompt_blocks_left=0, denoise_rounds=self.denoise_rounds,
                        rounds_run=self.rounds_run, shared_rounds=self.shared_rounds)

    # ------------------------------------------------------------ truth
    @property
    def true_rounds(self) -> int:
        """Hidden: every round the request takes (prompt blocks + denoising)."""
        return self.plan.prompt_blocks + self.true_denoise_rounds

    @property
    def true_rounds_left(self) -> int:
        """Hidden: rounds still to run (the oracle's key)."""
        return self.true_rounds - self.rounds_run

    # ------------------------------------------------------------ progress
    def run_round(self, round_index: int, end_s: float, shared: bool) -> bool:
        """Run one block in round ``round_index`` (1-based) ending at ``end_s``;
        ``True`` when the request finished with it."""
        self.rounds_run += 1
        self.last_round = round_index
        self._pass_run = 0
        if shared:
            self.shared_rounds += 1
        if self.in_prompt:
            self.prompt_done += 1
            return False
        self.denoise_rounds += 1
        self.round_in_block += 1
        if self.round_in_block < len(self.trajectories[self.block_index]):
            return False
        # NOTE: the confirming round of a block: it commits the block's tokens
        self.block_index += 1
        self.round_in_block = 0
        if self.block_index == 1:
            self.first_token_s = end_s
        if self.block_index < self.plan.gen_blocks:
            return False
        self.finish_s, self.finish_round = end_s, round_index
        return True

    def passed_over(self) -> None:
        """A round ran without it while it held a slot."""
        self._pass_run += 1
        self.longest_pass_admitted = max(self.longest_pass_admitted, self._pass_run)
