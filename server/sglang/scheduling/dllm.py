"""Diffusion-LM block rounds inside SGLang's scheduler, for diffusion policies.

The host side of ``policies/scheduling/rounds.py`` (hop 6d of
docs/lifecycle.md). SGLang's dLLM path (``SchedulerDllmMixin``) forms each
round in ``get_new_batch_dllm``: it moves the waiting queue's head into
``DllmManager`` (``_fetch_waiting_reqs``: the slots), then offers the
manager's requests to a ``PrefillAdder`` prompt-phase first
(``_process_dllm_batches``). For a policy ordering the rounds (``needs.rounds``,
``RoundsPolicy``) the scheduler subclass replaces both with ``DllmRounds``:

* ``fetch``: one ``policy.order_round`` over every unfinished request, admitted
  (in the manager) and waiting, each a ``RoundRequestView`` (its
  ``RequestView`` and its ``DllmView``);
  waiting requests take free slots in that order (deferred ones never);
* ``walk``: the manager's requests in that order, one block each, prompt and
  denoising blocks alike, until the round holds ``round_blocks`` blocks or the
  adder refuses one (SGLang's own batch-full and KV checks);
* ``after_round``: the per-request counts the next views show.

NOTE: a request passed over keeps its slot, its KV and its partly denoised
FDFO block: SGLang commits a block only after a forward that reported it done
(``finish_dllm_forward``) and re-initialises only requests that ran
(``DllmManager.init_next_round``). Checked live: a skipped request's greedy
output equals its output run alone (tests/live/test_server_dwise.py).
"""

from __future__ import annotations

import time
from typing import Any

from sglang.srt.dllm.mixin.req import DllmReqPhase
from sglang.srt.managers.schedule_policy import AddReqResult
from sglang.srt.model_executor.forward_batch_info import ForwardMode

from policies.scheduling.rounds import RoundRequestView, RoundsPolicy, RoundView, check_round, round_shape
from policies.views import DllmView
from server.sglang.scheduling.dllm_counts import DllmState
from server.sglang.scheduling.state import kind_record, put_kind_record, scheduler_state
from server.sglang.scheduling.views import request_view

_STAGING = (DllmReqPhase.STAGING_PREFILL, DllmReqPhase.STAGING_DECODE)


def state_of(req: Any) -> DllmState | None:
    """``req``'s round counts (its ``DllmState`` record; ``None``: the round host never saw it)."""
    return kind_record(req, DllmState)


def dllm_view(req: Any, state: DllmState, mask_id: int, round_index: int, admitted: bool) -> DllmView:
    """The ``DllmView`` of a ``Req`` (SGLang's own fields; docs/dwise-notes.md §3.1)."""
    block_size = state.block_size
    offset = int(req.dllm_block_offset or 0) if getattr(req, "dllm_initialized", False) else 0
    # NOTE: offset is where the current block starts; once fill ids are set for
    # a round it points at the block being run, else at the next one.
    incomplete = getattr(req, "dllm_incomplete_ids", None)
    return state.view(
        prompt_blocks_left=max(0, len(req.origin_input_ids) // block_size - offset // block_size),
        rounds_waited=max(0, round_index - state.last_round),
        admitted=admitted,
        masks_left=sum(1 for t in incomplete if t == mask_id) if incomplete else 0,
    )


class DllmRounds:
    """One scheduler's diffusion rounds under a diffusion policy (see module docs)."""

    def __init__(self, scheduler: Any, order: RoundsPolicy) -> None:
        self.s = scheduler
        self.order = order
        cfg = scheduler.dllm_config
        self.block_size = int(cfg.block_size)
        self.mask_id = int(cfg.mask_id)
        self.slots, self.round_blocks = round_shape(order.needs, int(cfg.max_running_requests))
        self.round = 0
        self.ranked: list[Any] = []
        """This round's admitted requests, best first (set by ``fetch``)."""

    def on_queued(self, req: Any) -> None:
        """Count a newly queued request's prompt words and lines once (``OnQueued``)."""
        if state_of(req) is not None:
            return
        text = self.prompt_text(req)
        put_kind_record(req, DllmState(last_round=self.round, block_size=self.block_size,
                                       words=len(text.split()), lines=text.count("\n") + 1 if text else 0))

    def prompt_text(self, req: Any) -> str:
        """The prompt as text, for its word and line counts.

        NOTE: SGLang's ``Req`` keeps only token ids (its ``origin_input_text``
        argument is not stored), so the prompt is decoded once, at arrival,
        with the scheduler's own tokenizer; none (``skip_tokenizer_init``): "".
        """
        tokenizer = getattr(self.s, "tokenizer", None)
        if tokenizer is None:
            return ""
        return str(tokenizer.decode(list(req.origin_input_ids), skip_special_tokens=True))

    def view(self, req: Any, admitted: bool) -> RoundRequestView:
        state = state_of(req)
        if state is None:  # NOTE: every request passes on_queued; this is a backstop
            self.on_queued(req)
            state = state_of(req)
        assert state is not None
        return RoundRequestView(request_view(req), dllm_view(req, state, self.mask_id, self.round, admitted))

    def fetch(self) -> None:
        """Replace ``_fetch_waiting_reqs``: decide the round's order, fill free slots."""
        manager = self.s.dllm_manager
        admitted = [r for r in manager.waiting_queue if not r.finished()]
        gate = scheduler_state(self.s).gate  # NOTE: refused on a diffusion LM today (compose/compat.py)
        waiting = [r for r in self.s.waiting_queue if gate is None or not gate.holds(r)]
        views = [self.view(r, True) for r in admitted] + [self.view(r, False) for r in waiting]
        if not views:
            self.ranked = []
            return
        view = RoundView(requests=tuple(views), now=time.perf_counter(), num_admitted=len(admitted))
        decision = self.order.order_round(view)
        check_round(view, decision)
        by_rid = {r.rid: r for r in admitted + waiting}
        held = {id(r) for r in admitted}
        free = self.slots - len(manager.waiting_queue)
        ranked, newcomers = [], []
        # NOTE: as the contract's walk: a waiting request takes a free slot only
        # while the round still has room for its block (the simulator's twin does
        # the same); later ones stay waiting, passed over.
        for rid in decision.order:
            req = by_rid[rid]
            if id(req) in held:
                ranked.append(req)
            elif free > 0 and len(ranked) < self.round_blocks:
                newcomers.append(req)
                ranked.append(req)
                free -= 1
        if newcomers:
            manager.add_waiting_reqs(newcomers)
            taken = {id(r) for r in newcomers}
            self.s.waiting_queue = [r for r in self.s.waiting_queue if id(r) not in taken]
        self.ranked = ranked

    def walk(self, adder: Any, running_batch: Any) -> Any:
        """Replace ``_process_dllm_batches``: one block per request in order."""
        s = self.s
        for req in self.ranked:
            if len(adder.can_run_list) >= self.round_blocks:
                break
            if req.dllm_phase in _STAGING:
                res = adder.add_dllm_staging_req(req)
            else:
                # NOTE: SGLang's own batch-full check for a request taking a new row
                held = sum(r.kv.holds_kv for r in adder.can_run_list)
                if len(adder.can_run_list) >= s.get_num_allocatable_reqs(len(running_batch.reqs),
                                                                         num_held_rows=held):
                    running_batch.batch_is_full = True
                    break
                req.init_next_round_input(s.tree_cache)
                res = adder.add_one_req(req, has_chunked_req=True, truncation_align_size=s.truncation_align_size)
            if len(adder.can_run_list) >= self.round_blocks:
                break  # NOTE: the round is full; not a KV shortage
            if res != AddReqResult.CONTINUE:
                if res == AddReqResult.NO_TOKEN:
                    running_batch.batch_is_full = True
                break
        return ForwardMode.DLLM_EXTEND

    def after_round(self, reqs: list[Any]) -> None:
        """Count the round that ``reqs`` were just given."""
        self.round += 1
        prefill = [r.is_dllm_prefill() for r in reqs]
        shared = any(prefill) and not all(prefill)
        for req, is_prefill in zip(reqs, prefill):
            state = state_of(req)
            if state is None:
                continue
            state.rounds_run += 1
            state.longest_wait = max(state.longest_wait, self.round - 1 - state.last_round)
            state.last_round = self.round
            if not is_prefill:
                state.denoise_rounds += 1
            if shared:
                state.shared_rounds += 1
