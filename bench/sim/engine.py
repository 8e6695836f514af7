"""The trace-replay simulator: SGLang's scheduler loop over a cost model.

One loop iteration is one SGLang forward pass (``get_next_batch_to_run``)::

    1. arrivals up to now enter (the gate, if a kind puts one: admit / defer / reject)
    2. prefill pass, unless the batch is full or nothing waits:
       revisit deferred requests, order the queue (policy), continue the chunked
       request, then admit waiting requests in order until one does not fit
    3. a prefill batch if one formed (prefill first, as SGLang), else a decode
       step over the running batch (retracting requests if KV is short), else
       idle until the next arrival

Time advances by the cost model's iteration time. A prefill batch's requests
get their (next) token at its end; a closed-loop follower is released its
think time after its predecessor finished (or was turned away). SGLang's
overlap scheduler (CPU scheduling hidden behind the GPU) is folded into the
cost model's per-iteration overhead; an option that forces it off pays the
accelerator's ``no_overlap_slowdown`` on every iteration instead
(``overlap.overlap_charged``, outside this loop). Its one-step lag in
processing results is modeled on CPU only (``synchronous_forward``), and mixed
prefill+decode batches not at all (off by default).

Gaps (a hollowing eviction policy or a host tier, ``bench/sim/cache.py``): a
request admitted with hollow nodes on its matched path gets their KV back
before its prefill: host copies are restored (charged at the host tier's
bandwidth), the rest recomputed at their original positions in the request's
first prefill pass, attending to the context before them
(``CostModel.prefill_time``'s ``gaps``), not chunked. The tail after a gap is
reused as it is. ``cached_first`` counts reused and restored tokens only; the
recomputed gap is in ``prefill_tokens``. Counters (run meta):
``gap_recomputed_tokens``, ``restored_tokens``, and for every policy
``evicted_recomputed_tokens`` (prompt tokens the cache held once but not at
admission, prefilled again) and ``reusable_tokens`` (prompt tokens the cache
had held once, at admission: what an unbounded cache would reuse; the share
read back from any tier is ``1 - evicted_recomputed / reusable``).

``NOTE`` (checked by ``check``): ``cache.tree_tokens + private_tokens <=
capacity`` at all times, and ``private_tokens`` is the sum over requests.

NOTE (size): ~475 lines, kept whole on purpose. This is SGLang's event loop:
one iteration reads and writes the same few fields (``now``, the pool's
``private_tokens``, ``queue``, ``running``, ``chunked``, ``batch_is_full``,
``new_token_ratio``) in every phase, and the pool invariant above spans them
all. Split by phase, each module would take the whole simulator as an argument,
or be a mixin of it; the parts that stand alone are already their own modules
(``prefill.PrefillAdder``, ``running.RunningBatch``, ``queue.WaitingQueue``,
``cache.PrefixCache``, ``arrivals.Arrivals``). What a kind adds to the loop
comes in as seams on the events of ``events.py``; the loop names no kind.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

from bench.sim.arrivals import Arrivals, ArrivalSource
from bench.sim.cache import PrefixCache
from bench.sim.cost import IterationCost
from bench.sim.events import (
    CountsWork,
    DraftsDecode,
    FiltersWalk,
    GatesArrival,
    OnBatchFormed,
    TagsArrival,
    having,
    one,
)
from bench.sim.prefill import AddResult, PrefillAdder
from bench.sim.queue import WaitingQueue
from bench.sim.request import FINAL, Phase, SimRequest
from bench.sim.running import RunningBatch
from bench.sim.settings import SimSettings
from bench.traces.trace import Trace
from policies.feedback import FinishedView, ObservesFinished


class SimulationError(RuntimeError):
    """The simulation reached a state SGLang could not be in."""


class Simulator:
    """Replays one trace against one set of policies (see module docs)."""

    def __init__(self, trace: Trace, cost: IterationCost, settings: SimSettings, *,
                 queue: WaitingQueue, cache: PrefixCache,
                 seams: Sequence[object] = (),
                 on_sample: Callable[[Simulator], None] | None = None,
                 on_final: Callable[[SimRequest], None] | None = None,
                 observers: Sequence[ObservesFinished] = ()) -> None:
        self.trace, self.cost, self.s = trace, cost, settings
        self.cache, self.queue = cache, queue
        self.seams = list(seams)
        """The chosen kinds' seams (``events.py``), in binding order."""
        self.taggers: list[TagsArrival] = having(self.seams, TagsArrival)
        self.gate: GatesArrival | None = one(self.seams, GatesArrival, "arrival gate")
        self.walk_filters: list[FiltersWalk] = having(self.seams, FiltersWalk)
        self.on_batch: list[OnBatchFormed] = having(self.seams, OnBatchFormed)
        self.drafter: DraftsDecode | None = one(self.seams, DraftsDecode, "decode step")
        self._walk_skipped = False
        """The last prefill walk skipped a request on a walk filter's word."""
        self.running = RunningBatch()
        self.chunked: SimRequest | None = None
        self.requests: dict[str, SimRequest] = {}
        self.now = 0.0
        self.private_tokens = 0
        self.processed_tokens = 0
        self.batch_is_full = False
        self.num_retractions = 0
        self.new_token_ratio = settings.init_new_token_ratio
        self.num_iterations = 0
        self.arrivals: ArrivalSource = Arrivals(trace)
        self._seq = itertools.count()
        self._last_activity = 0.0
        self.on_sample = on_sample
        self._gaps: dict[SimRequest, tuple[list[tuple[int, int]], int]] = {}
        """Gap work of requests admitted this pass: (recompute segments, restored tokens)."""
        self._resume_s = 0.0
        """Seconds of snapshot reads the next prefill pass waits for (``cache.take_resume_s``)."""
        self.gap_recomputed_tokens = 0
        self.restored_tokens = 0
        self.evicted_recomputed_tokens = 0
        self.reusable_tokens = 0
        self.on_final = on_final
        self.observers = list(observers)
        """Policies told about every request that leaves (``ObservesFinished``)."""

    # ------------------------------------------------------------- accounting
    @property
    def capacity(self) -> int:
        """Slots of the KV pool."""
        return self.s.capacity

    @property
    def free_tokens(self) -> int:
        """Pool slots neither cached nor held by a request."""
        return self.s.capacity - self.cache.tree.tree_tokens - self.private_tokens

    def _ensure_free(self, n: int) -> bool:
        """Evict until ``n`` slots are free; whether that worked."""
        short = n - self.free_tokens
        if short > 0:
            self.cache.evict(short)
        return self.free_tokens >= n

    def _alloc(self, r: SimRequest, n: int) -> None:
        if not self._ensure_free(n):
            raise SimulationError(f"out of KV memory allocating {n} tokens for {r.rid}")
        r.private_tokens += n
        self.private_tokens += n

    def _free_private(self, r: SimRequest) -> None:
        self.private_tokens -= r.private_tokens
        r.private_tokens = 0

    def check(self) -> None:
        """Assert the pool and lock invariants (tests call this)."""
        self.cache.check()
        assert self.cache.tree_tokens + self.private_tokens <= self.s.capacity
        held = sum(r.private_tokens for r in self.requests.values() if r.phase not in FINAL)
        synced = sum(self.running.step - r.decode_from for r in self.running)
        assert held + synced == self.private_tokens, (held, synced, self.private_tokens)
        for r in self.running:
            assert r.lock_node is not None and r.phase is Phase.RUNNING

    # ---------------------------------------------------------------- arrivals
    def _arrive(self, r: SimRequest) -> None:
        """A new request: clip its output to what can ever fit (SGLang's
        ``init_req_max_new_tokens``), then the arrival seams (tags, the gate), then the queue."""
        self.requests[r.rid] = r
        # NOTE: one token more headroom than SGLang's clip: a fully cached prompt
        # pins its whole prefix while it is checked, which must still fit.
        max_new = min(r.output_len, self.s.context_length - r.input_len - 1,
                      self.s.capacity - r.input_len - 3)
        if max_new < 1:
            self._final(r, Phase.ABORTED, "prompt exceeds the context length or the KV pool")
            return
        r.output_len = max_new
        r.seq = next(self._seq)
        for seam in self.taggers:
            seam.tag(r)
        self._stamp_queue_entry(r)
        if self.gate is not None:
            rejected = self.gate.on_arrival(self, r)
            if rejected is not None:
                self._final(r, Phase.REJECTED, rejected)
                return
        self.queue.append(r)

    def _stamp_queue_entry(self, r: SimRequest) -> None:
        r.phase = Phase.WAITING
        r.queue_time = self.now
        r.arrival_processed_tokens = self.processed_tokens
        r.view = None  # NOTE: the queue rebuilds it (append marks it stale)

    def _enqueue(self, r: SimRequest) -> None:
        self._stamp_queue_entry(r)
        self.queue.append(r)

    @property
    def num_deferred(self) -> int:
        """Waiting requests the gate deferred."""
        return self.gate.num_deferred if self.gate is not None else 0

    def _revisit_deferred(self) -> None:
        assert self.gate is not None
        rejected = self.gate.revisit(self, self.queue.items)
        if rejected:
            self.queue.remove([r for r, _ in rejected])
            for r, why in rejected:
                self._final(r, Phase.REJECTED, why)

    def _final(self, r: SimRequest, phase: Phase, reason: str = "") -> None:
        r.phase = phase
        r.reject_reason = reason
        if r.finish_s is None:
            r.finish_s = self.now
        if self.observers and phase is not Phase.UNSERVED:
            view = FinishedView(rid=r.rid, now=self.now, num_input_tokens=r.input_len,
                                num_output_tokens=r.num_output, num_cached_tokens=r.cached_first or 0,
                                session_id=r.trace.session_id, aborted=phase is not Phase.FINISHED,
                                features=r.features)
            for policy in self.observers:
                policy.observe_finished(view)
        self.arrivals.release_followers(r.rid, self.now)
        if self.on_final is not None:
            self.on_final(r)

    # ----------------------------------------------------------------- prefill
    def _prefill_pass(self) -> PrefillAdder | None:
        self._walk_skipped = False
        if not self.running:
            self.batch_is_full = False
        if (self.batch_is_full or not self.queue) and self.chunked is None:
            return None
        slots = self.s.max_running_requests - len(self.running) - (1 if self.chunked else 0)
        if slots <= 0 and self.chunked is None:
            self.batch_is_full = True
            return None
        if self.num_deferred:
            self._revisit_deferred()
        self.queue.sort(self.now, self.processed_tokens, len(self.running),
                        has_deferred=self.num_deferred > 0, bounds=self._head_bounds(slots))
        adder = PrefillAdder(
            self.cache, self.free_tokens, self._running_offset(), rem_input=self.s.max_prefill_tokens,
            rem_chunk=self.s.chunked_prefill_size, page_size=1,
            clip=self.s.clip_max_new_tokens, max_requests=self.s.prefill_max_requests)
        still_chunked = adder.add_chunked(self.chunked) if self.chunked is not None else False
        admitted: list[SimRequest] = []
        filters = self.walk_filters
        for f in filters:
            f.walk_started(self.running, [r for r, _ in adder.batch])
        for r in self.queue.items:
            if adder.budget_state() is AddResult.OTHER or r.deferred:
                break
            if filters and not all(f.admits(r) for f in filters):
                self._walk_skipped = True
                continue  # NOTE: SGLang skips it and walks on (e.g. can_schedule_lora_req)
            if len(admitted) >= slots:
                self.batch_is_full = True
                break
            self.queue.rematch(r, self.now, touch=True, split=True)  # init_next_round_input
            result = adder.add(r)
            if adder.batch and adder.batch[-1][0] is r:
                admitted.append(r)
                for f in filters:
                    f.walked(r)
            if result is not AddResult.CONTINUE:
                if result is AddResult.NO_TOKEN:
                    self.batch_is_full = bool(adder.batch) or bool(self.running)
                break
        if not adder.batch:
            return None
        self._start_prefill(adder, admitted, still_chunked)
        return adder

    def _head_bounds(self, slots: int) -> tuple[int | None, float]:
        """How far into the order the walk below can get at most (the server's ``head_bounds``).

        NOTE: the walk stops after ``slots`` admissions, at ``prefill_max_requests``,
        or once the token budget of the smaller of ``max_prefill_tokens`` and the
        chunk is spent: the larger of the two bounds it from above.
        """
        limit = max(0, slots)
        if self.s.prefill_max_requests is not None:
            limit = min(limit, self.s.prefill_max_requests)
        budget = max(self.s.max_prefill_tokens, self.s.chunked_prefill_size or 0)
        return limit, float(budget) if budget > 0 else math.inf

    def _running_offset(self) -> float:
        total = 0.0
        for r in self.running:
            self.running.sync(r)
            ratio = 1.0 if self.s.ignore_eos else self.new_token_ratio
            total += min(r.output_len - r.num_output, self.s.clip_max_new_tokens) * ratio
        return total

    def _start_prefill(self, adder: PrefillAdder, admitted: list[SimRequest], still_chunked: bool) -> None:
        self.queue.remove(admitted)
        for r in admitted:
            r.phase = Phase.PREFILLING
            r.lock_node = r.match_node
            r.inserted_blocks = r.match_blocks
            r.computed = r.cached_tokens()
            self._resume_s += self.cache.take_resume_s(r.blocks, r.match_blocks, self.now)
            recomputed = self._fill_gaps(r) if self.cache.may_have_gaps else 0
            reused = r.computed - recomputed
            if r.cached_first is None:
                r.cached_first = reused
            seen = min(self.cache.seen_tokens(r.blocks, r.input_len), r.fill_len - 1)
            self.evicted_recomputed_tokens += max(0, seen - reused)
            self.reusable_tokens += seen
        if not still_chunked:
            self.chunked = None
        if adder.new_chunked is not None:
            self.chunked = adder.new_chunked
        for r, extend in adder.batch:
            self._alloc(r, extend)
            self.processed_tokens += extend

    def _fill_gaps(self, r: SimRequest) -> int:
        """Give the hollow nodes on ``r``'s locked path their KV back; return the
        gap tokens it recomputes (charged in its first prefill pass)."""
        assert r.lock_node is not None
        need = self.cache.hollow_tokens(r.lock_node)
        if need == 0:
            return 0
        if not self._ensure_free(need):
            raise SimulationError(f"out of KV memory refilling a {need}-token gap for {r.rid}")
        gaps, restored = self.cache.fill_path(r.lock_node)
        recomputed = sum(t for t, _ in gaps)
        self._gaps[r] = (gaps, restored)
        r.prefill_tokens += recomputed
        self.gap_recomputed_tokens += recomputed
        self.restored_tokens += restored
        return recomputed

    def _run_prefill(self, adder: PrefillAdder) -> None:
        if self.on_batch:
            batch = [r for r, _ in adder.batch]
            for seam in self.on_batch:
                self.now += seam.batch_formed(batch, True)
        pairs = [(e, r.computed) for r, e in adder.batch]
        # NOTE: snapshots read back before the pass (hybrid models), not overlapped with it
        extra_s, self._resume_s = self._resume_s, 0.0
        if self._gaps:
            gaps = [g for r, _ in adder.batch for g in self._gaps.get(r, ((), 0))[0]]
            restored = sum(self._gaps.get(r, ((), 0))[1] for r, _ in adder.batch)
            self._gaps.clear()
            if restored:
                extra_s += self.cache.restore_s(restored, self.cost.kv_bytes_per_token)
            self.now += self.cost.prefill_time(pairs, gaps, extra_s) if gaps or extra_s \
                else self.cost.prefill_time(pairs)
        elif extra_s:
            self.now += self.cost.prefill_time(pairs, (), extra_s)
        else:
            self.now += self.cost.prefill_time(pairs)
        for r, extend in adder.batch:
            r.computed += extend
            r.prefill_tokens += extend
            self._cache_progress(r)
            if r.computed < r.fill_len:
                continue  # NOTE: only the chunked request stops short
            r.num_output += 1
            if r.first_token_s is None:
                r.first_token_s = self.now
            r.segments.append((self.now, self.running.step, self.running.step))
            if r.num_output >= r.output_len:
                self._finish(r)
            else:
                self.running.join(r)

    def _cache_progress(self, r: SimRequest) -> None:
        """Insert the prompt blocks ``r`` has fully computed (SGLang
        ``cache_unfinished_req``); their tokens leave its private KV."""
        if r.blocks is None:
            return
        bs = self.cache.block_size
        n = len(r.blocks) if r.computed >= r.input_len else min(len(r.blocks), r.computed // bs)
        if n <= r.inserted_blocks:
            return
        node, _ = self.cache.insert(r.blocks[:n], r.input_len, self.now,
                                    inserted_blocks=r.inserted_blocks, priority=r.trace.priority or 0,
                                    session=r.trace.session_id, final=r.computed >= r.input_len)
        moved = self.cache.tokens_of(n, r.input_len) - self.cache.tokens_of(r.inserted_blocks, r.input_len)
        r.private_tokens -= moved
        self.private_tokens -= moved
        self.cache.lock(node)
        assert r.lock_node is not None
        self.cache.unlock(r.lock_node)
        r.lock_node, r.inserted_blocks = node, n

    def _finish(self, r: SimRequest) -> None:
        self._release(r)
        self._final(r, Phase.FINISHED)

    def _release(self, r: SimRequest) -> None:
        """Give back ``r``'s KV: private tokens freed, its prefix path unlocked."""
        if r.phase is Phase.RUNNING:
            self.running.leave(r)
            self.batch_is_full = False
        self._free_private(r)
        if r.lock_node is not None:
            self.cache.unlock(r.lock_node)
            r.lock_node = None

    # ------------------------------------------------------------------ decode
    def _run_decode(self) -> None:
        # NOTE: page size 1: each running request needs one new slot per step.
        if not self._ensure_free(len(self.running)):
            self._retract()
            if not self.running:
                return
        else:
            s = self.s
            self.new_token_ratio = max(self.new_token_ratio - s.new_token_ratio_decay, s.min_new_token_ratio)
        n = len(self.running)
        if not self._ensure_free(n):
            raise SimulationError("decode step does not fit after retraction")
        if self.on_batch:
            batch = list(self.running)
            for seam in self.on_batch:
                self.now += seam.batch_formed(batch, False)
        if self.drafter is not None:
            self._run_speculative_decode(self.drafter, n)
            return
        self.private_tokens += n
        self.now += self.cost.decode_time(n, self.running.context_tokens())
        for r in self.running.advance(self.now):
            self._finish(r)

    def _run_speculative_decode(self, drafter: DraftsDecode, n: int) -> None:
        """A decode step that verifies drafts: each request gains 1 + its accepted drafts.

        NOTE: the drafts' KV slots are needed for the verify (``n * (draft + 1)``);
        if they do not fit the step drafts nothing. Rejected drafts' slots are
        freed after the verify, so ``private_tokens`` grows by the tokens kept."""
        batch = list(self.running)
        draft, draft_s = drafter.plan_step(batch)
        if draft and not self._ensure_free(n * (draft + 1)):
            draft, draft_s = 0, 0.0
        step_s = self.cost.verify_time(n, draft, self.running.context_tokens(), draft_s)
        self.now += step_s
        accepted = drafter.step_verified(batch, draft, step_s)
        gains = self.running.accept(batch, accepted)
        self.private_tokens += n + gains
        for r in self.running.advance(self.now):
            self._finish(r)

    def _retract(self) -> None:
        """SGLang's ``retract_decode``: drop the least worth keeping until the
        step fits (keeping one); abort the last one if even it cannot."""
        order = self.running.retraction_order()
        retracted: list[SimRequest] = []
        first = True
        while first or not self._ensure_free(len(order)):
            if len(order) == 1:
                break
            first = False
            r = order.pop()
            self._release(r)
            self._ensure_free(len(order) * self.s.retract_decode_steps)
            retracted.append(r)
        if len(order) <= 1 and not self._ensure_free(len(order)):
            last = order.pop()
            self._release(last)
            self._final(last, Phase.ABORTED, "out of KV memory even after retracting the rest")
        self.running.reorder(order)
        decoded = sum(r.num_output for r in order)
        wanted = sum(r.output_len for r in order)
        self.new_token_ratio = min(1.0, (decoded + self.s.retract_decode_steps * len(order)) / (wanted + 1))
        for r in retracted:
            r.retractions += 1
            r.computed = r.inserted_blocks = 0
            self._enqueue(r)  # NOTE: re-matched at the next pass (append marks it dirty)
        self.num_retractions += len(retracted)

    # -------------------------------------------------------------------- loop
    def _idle(self) -> bool:
        """Nothing to run: jump ahead; ``False`` when the replay is over."""
        self.new_token_ratio = self.s.init_new_token_ratio  # NOTE: SGLang resets it when idle
        nxt = self.arrivals.next_time()
        # NOTE: requests a seam holds (deferred, or skipped by a walk filter) may run
        # on a later pass: the loop polls, as SGLang's does; any other wait is a bug.
        held = self.num_deferred > 0 or self._walk_skipped
        if self.queue and self.num_deferred < len(self.queue) and not self._walk_skipped:
            raise SimulationError(f"{len(self.queue)} requests wait but nothing can run")
        if held:
            if nxt == float("inf") and self.now - self._last_activity > self.s.drain_timeout_s:
                left = list(self.queue.items)
                self.queue.remove(left)
                why = "still deferred at the end of the replay" if self.num_deferred \
                    else "still held by a walk filter at the end of the replay"
                if self.gate is not None:
                    self.gate.num_deferred = 0
                for r in left:
                    self._final(r, Phase.UNSERVED, why)
                return False
            self.now = min(nxt, self.now + self.s.idle_poll_s)
            return True
        if nxt == float("inf"):
            return False
        self.now = max(self.now, nxt)
        return True

    def run(self) -> None:
        """Replay the whole trace."""
        while self.step():
            pass

    def step(self) -> bool:
        """One loop iteration (a forward pass, or an idle jump); ``False`` when
        the replay is over. NOTE: ``bench.sim.cluster`` steps replicas one
        iteration at a time, in time order."""
        for at, tr in self.arrivals.until(self.now):
            r = SimRequest(tr, at)
            if self.s.length_signal is not None:
                r.features = self.s.length_signal.features(r.rid, r.output_len)
            self._arrive(r)
            self._last_activity = self.now
        adder = self._prefill_pass()
        if adder is not None:
            self._run_prefill(adder)
        elif self.running:
            self._run_decode()
        else:
            return self._idle()
        self._last_activity = self.now
        self.num_iterations += 1
        if self.on_sample is not None:
            self.on_sample(self)
        return True

    def counters(self) -> dict[str, int]:
        """The seams' counters (``CountsWork``), for the run's meta."""
        out: dict[str, int] = {}
        for seam in having(self.seams, CountsWork):
            out.update(seam.counters())
        return out

    @property
    def has_work(self) -> bool:
        """Something waits, runs or is mid-prefill (an idle replica has none)."""
        return bool(self.queue) or bool(self.running) or self.chunked is not None
