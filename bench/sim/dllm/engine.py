"""The dLLM round loop: SGLang's stock scheduling, or a diffusion policy's walk.

One iteration is one scheduler round (SGLang ``get_new_batch_dllm`` + one
forward, FDFO): arrivals up to the round's start join, the round's blocks are
chosen, the round costs ``RoundCost.round_time`` and every chosen request
advances one block at its end. Requests arriving during a round join the next
one; with nothing to run the loop jumps to the next arrival.

Stock (no policy, or a policy with ``needs.sglang_native``, i.e. ``fcfs``;
docs/dwise-notes.md §2, §3.2):

* ``_fetch_waiting_reqs``: the waiting queue's head, in arrival order, fills
  the free slots (``slots`` = SGLang's ``max_running_requests``); a request
  keeps its slot until it finishes (no preemption);
* ``_process_dllm_batches``: if any admitted request is still prefilling its
  prompt, only those run this round (prefill first); else every admitted one
  runs (the budget ``slots x B`` takes one block from each).

A round order (``needs.rounds``, ``RoundsPolicy``; ``policies/scheduling/rounds.py``):
once per round ``policy.order_round`` over every unfinished request (admitted,
then waiting, in arrival order, each a ``RoundRequestView``); the walk gives an
admitted request one block, admits a waiting one into a free slot (else
passes over it) and stops at ``round_blocks`` blocks. Prompt and denoising
blocks share rounds. ``RequestView.features`` stays ``None`` (no hidden
states in the simulator).
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Callable
from dataclasses import dataclass

from bench.sim.arrivals import Arrivals
from bench.sim.dllm.blocks import RoundsModel, request_rng
from bench.sim.dllm.cost import RoundCost
from bench.sim.dllm.oracle import ReadsHiddenTruth
from bench.sim.dllm.request import DllmRequest, block_plan
from bench.sim.engine import SimulationError
from bench.traces.trace import Trace, TraceRequest
from policies.feedback import FinishedView, ObservesFinished
from policies.scheduling import SchedulingOption
from policies.scheduling.rounds import RoundsPolicy, RoundView, check_round


@dataclass(frozen=True)
class DllmParams:
    """Every number the dLLM loop reads."""

    block_size: int
    slots: int
    """Requests holding a slot (and KV) at once."""
    round_blocks: int
    """Blocks one round takes at most (stock: ``slots``)."""
    rounds: RoundsModel
    cost: RoundCost
    max_new_tokens: int | None = None
    """Every request's cap (the host's ``max_new_tokens``; outputs longer in the
    trace are cut to it); ``None``: each request's own trace length (ignore_eos)."""
    seed: int = 0
    """Seed of the per-request truth (``blocks.request_rng``)."""

    def __post_init__(self) -> None:
        if self.block_size < 1 or self.slots < 1 or not 1 <= self.round_blocks <= self.slots:
            raise ValueError("need block_size >= 1, slots >= 1 and 1 <= round_blocks <= slots")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1 or None, got {self.max_new_tokens}")


class DllmSimulator:
    """Replays a trace through dLLM block rounds (module docs)."""

    def __init__(self, trace: Trace, params: DllmParams, policy: SchedulingOption | None = None,
                 check_every_round: bool = False) -> None:
        self.trace = trace
        self.p = params
        self.native = policy is None or policy.needs.sglang_native is not None
        faces: object = policy  # NOTE: optional faces, checked at runtime
        self.policy: RoundsPolicy | None = None
        """The round order this loop calls (``None``: SGLang's own rounds)."""
        if not self.native:
            if not isinstance(faces, RoundsPolicy) or faces.needs.rounds is None:
                raise SimulationError(f"{type(policy).__name__} does not order a diffusion LM's rounds")
            self.policy = faces
        if isinstance(faces, ReadsHiddenTruth):
            faces.bind_truth(self.true_rounds_left)  # NOTE: bench-only oracle
        self.observers: list[ObservesFinished] = [faces] if isinstance(faces, ObservesFinished) else []
        self.check_every_round = check_every_round
        self.arrivals = Arrivals(trace)
        self._seq = itertools.count()
        self.now = 0.0
        self.round = 0
        """Rounds run so far (the next round is ``round + 1``)."""
        self.requests: dict[str, DllmRequest] = {}
        self.waiting: dict[str, DllmRequest] = {}
        """Arrived, holding no slot, in arrival order."""
        self.admitted: dict[str, DllmRequest] = {}
        """Holding a slot, in admission order."""
        self.round_sizes = array("i")
        """Blocks of each round."""
        self.round_prompt_blocks = array("i")
        """Prompt blocks of each round."""
        self.round_ends = array("d")
        self.blocks_run = 0
        self.finished = 0
        self.on_round: Callable[[DllmSimulator], None] | None = None
        self.on_final: Callable[[DllmRequest], None] | None = None

    # ---------------------------------------------------------------- truth
    def true_rounds_left(self, rid: str) -> int:
        """Hidden truth for the bench-only oracle: rounds ``rid`` still takes."""
        return self.requests[rid].true_rounds_left

    # ---------------------------------------------------------------- loop
    def run(self) -> None:
        """Replay the whole trace, then check that nothing was lost."""
        while self.step():
            pass
        self.check(final=True)

    def step(self) -> bool:
        """One round, or an idle jump to the next arrival; ``False`` when done."""
        self._take_arrivals()
        if not self.waiting and not self.admitted:
            t = self.arrivals.next_time()
            if t == float("inf"):
                return False
            self.now = max(self.now, t)
            return True
        chosen = self._stock_round() if self.native else self._policy_round()
        self._run(chosen)
        if self.check_every_round:
            self.check()
        if self.on_round is not None:
            self.on_round(self)
        return True

    def _take_arrivals(self) -> None:
        for at, tr in self.arrivals.until(self.now):
            r = self._new_request(tr, at)
            if r.rid in self.requests:
                raise SimulationError(f"duplicate rid {r.rid!r}")
            self.requests[r.rid] = r
            self.waiting[r.rid] = r

    def _new_request(self, tr: TraceRequest, at: float) -> DllmRequest:
        """Draw the request's hidden truth from its own generator."""
        cap = self.p.max_new_tokens
        out = tr.output_tokens if cap is None else min(tr.output_tokens, cap)
        plan = block_plan(tr.input_tokens, out, self.p.block_size)
        rng = request_rng(self.p.seed, tr.rid)
        trajectories = (self.p.rounds.trajectory(plan.first_masks, rng),
                        *(self.p.rounds.trajectory(self.p.block_size, rng) for _ in range(plan.gen_blocks - 1)))
        return DllmRequest(tr, next(self._seq), at, out, out if cap is None else cap, self.p.block_size,
                           trajectories, self.round)

    def _admit(self, r: DllmRequest) -> None:
        del self.waiting[r.rid]
        r.admitted = True
        self.admitted[r.rid] = r

    def _stock_round(self) -> list[DllmRequest]:
        """SGLang's own: head of the queue into free slots, prompt blocks first."""
        while len(self.admitted) < self.p.slots and self.waiting:
            self._admit(next(iter(self.waiting.values())))
        prompt = [r for r in self.admitted.values() if r.in_prompt]
        # NOTE: the stock budget is slots x B tokens: every eligible request runs
        return prompt or list(self.admitted.values())

    def _policy_round(self) -> list[DllmRequest]:
        """The diffusion contract: one order, one walk (module docs)."""
        assert self.policy is not None
        views = tuple(r.view(self.round) for r in itertools.chain(self.admitted.values(), self.waiting.values()))
        view = RoundView(requests=views, now=self.now, num_admitted=len(self.admitted))
        decision = self.policy.order_round(view)
        check_round(view, decision)
        free = self.p.slots - len(self.admitted)
        chosen: list[DllmRequest] = []
        for rid in decision.order:
            if len(chosen) >= self.p.round_blocks:
                break
            r = self.requests[rid]
            if r.admitted:
                chosen.append(r)
            elif free > 0:
                self._admit(r)
                free -= 1
                chosen.append(r)
            # NOTE: a waiting request with no free slot is passed over; the walk goes on
        return chosen

    def _run(self, chosen: list[DllmRequest]) -> None:
        n = len(chosen)
        if not 1 <= n <= self.p.round_blocks or len(self.admitted) > self.p.slots:
            raise SimulationError(f"round {self.round + 1}: {n} blocks (capacity {self.p.round_blocks}), "
                                  f"{len(self.admitted)} admitted ({self.p.slots} slots)")
        end = self.now + self.p.cost.round_time([r.context_tokens for r in chosen])
        self.round += 1
        prompt = sum(1 for r in chosen if r.in_prompt)
        shared = 0 < prompt < n
        ran = {r.rid for r in chosen}
        for r in self.admitted.values():
            if r.rid not in ran:
                r.passed_over()
        done = [r for r in chosen if r.run_round(self.round, end, shared)]
        self.round_sizes.append(n)
        self.blocks_run += n
        self.round_prompt_blocks.append(prompt)
        self.round_ends.append(end)
        self.now = end
        for r in done:
            self._finish(r)

    def _finish(self, r: DllmRequest) -> None:
        del self.admitted[r.rid]
        r.admitted = False
        self.finished += 1
        view = FinishedView(rid=r.rid, now=self.now, num_input_tokens=r.prompt_tokens,
                            num_output_tokens=r.output_tokens, session_id=r.trace.session_id,
                            dllm=r.finished_dllm())
        for o in self.observers:
            o.observe_finished(view)
        self.arrivals.release_followers(r.rid, self.now)
        if self.on_final is not None:
            self.on_final(r)

    # ---------------------------------------------------------------- invariants
    def check(self, final: bool = False) -> None:
        """Raise ``SimulationError`` unless the loop's invariants hold: slots
        never exceed ``slots``, rounds never exceed their capacity, every
        finished request ran exactly its prompt blocks plus its true denoising
        rounds, every block run is some request's; with ``final``: every trace
        request arrived and finished (nothing lost)."""
        def fail(msg: str) -> None:
            raise SimulationError(f"dLLM invariant: {msg}")

        if len(self.admitted) > self.p.slots:
            fail(f"{len(self.admitted)} requests hold {self.p.slots} slots")
        if self.round_sizes and max(self.round_sizes) > self.p.round_blocks:
            fail(f"a round ran {max(self.round_sizes)} blocks (capacity {self.p.round_blocks})")
        if set(self.admitted) & set(self.waiting):
            fail("a request is both waiting and admitted")
        for r in self.requests.values():
            if r.finished:
                if (r.rounds_run, r.denoise_rounds, r.prompt_done) != \
                        (r.true_rounds, r.true_denoise_rounds, r.plan.prompt_blocks):
                    fail(f"{r.rid} ran {r.rounds_run} rounds ({r.denoise_rounds} denoising), "
                         f"truth {r.true_rounds} ({r.true_denoise_rounds})")
                if r.rid in self.admitted or r.rid in self.waiting:
                    fail(f"{r.rid} finished but still queued")
            elif r.rounds_run >= r.true_rounds or (r.rid in self.admitted) == (r.rid in self.waiting):
                fail(f"{r.rid}: {r.rounds_run} rounds of {r.true_rounds}, unfinished and not queued once")
        if sum(self.round_sizes) != sum(r.rounds_run for r in self.requests.values()):
            fail("blocks run do not add up to the requests' rounds")
        if final:
            lost = len(self.trace.requests) - self.finished
            if lost or len(self.requests) != len(self.trace.requests):
                fail(f"{lost} of {len(self.trace.requests)} requests never finished")
