"""``+decisions``: shared-context decision calls in the simulator (the kind's binding).

A *decision call* is one shared context (``C`` tokens) and ``N`` short questions
(``q_i`` tokens), each answered at its last token: prefill only, no generation.
``simulate_decisions`` replays calls on ONE server, one prefill pass at a time: when
idle with something pending it asks the policy (``policies.decisions``) for a pack,
checks it, charges ``CostModel.prefill_time`` of the pass's shape (``pass_shape``),
and marks its questions done at the pass end; a call finishes with its last
question; an idle server jumps to the next arrival. No KV pool (a pass frees it).

* unpacked (``separate``, SGLang's ``/v1/decisions``): an extend ``(C + q, 0)`` per
  prompt, ``(q, C)`` when the context is cached;
* packed (``flide``): a group is ONE request: the extend ``(C, 0)`` (cached: the first
  question is the extend, ``(q, C)``), each other question a gap ``(q_i, C)`` (it
  attends to the context and to itself);
* ``layout="multi_item"``: SGLang's ``/v1/score`` multi-item scoring (``--enable-mis``:
  ``query<delim>item1<delim>...``, ``C + sum(q_i + 1)`` tokens in one sequence, radix
  cache off): Flide's packing, each question one delimiter longer, never cached.

NOTE: ``CostModel`` charges one LM-head row per extend; a packed group reads one per
question, so a pass adds ``2 * head_params * extra rows / prefill_flops_per_s`` as its
``extra_s`` (serial: prefill is compute-bound, so it is what the roofline would add).
``holds_context=False`` models a recurrent (hybrid) model, whose state is cached only
at a request's end: no context is ever cached (its passes cost the profile's).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from bench.sim.binding import Scope, SimParts
from compose.specs import build_policy
from policies.decisions import DecisionsPolicy, Pack, PackView, PendingDecision, check_pack, sequence_tokens

if TYPE_CHECKING:
    from bench.config import BenchSettings
    from bench.sim.cost import CostModel
    from compose.specs import PolicySpec

Layout = Literal["native", "multi_item"]


@dataclass(frozen=True)
class DecisionCall:
    """One decision call: a shared context and its questions."""

    call_id: str
    arrival_s: float
    context_tokens: int
    question_tokens: tuple[int, ...]


@dataclass(frozen=True)
class DecisionMix:
    """The stated distributions of a call's sizes (each draw from ``random.Random(seed)``).

    * ``N`` (questions): log-uniform integer in ``questions``: ``floor(exp(U(ln lo, ln(hi + 1))))``;
    * ``C`` (context tokens): log-uniform integer in ``context``, the same way;
    * ``q_i`` (question tokens): ``question_base + G``, ``G`` geometric on ``0, 1, ...``
      with mean ``question_extra_mean`` (16: ``q_i`` has mean ~24), clipped to
      ``[question_base, question_max]`` = ``[8, 64]``.
    """

    questions: tuple[int, int] = (4, 64)
    context: tuple[int, int] = (1024, 8192)
    question_base: int = 8
    question_extra_mean: float = 16.0
    question_max: int = 64


def _sizes(rng: random.Random, mix: DecisionMix) -> tuple[int, tuple[int, ...]]:
    """One call's context and question tokens (``DecisionMix``)."""
    def log_uniform(lo: int, hi: int) -> int:
        return min(hi, int(math.exp(rng.uniform(math.log(lo), math.log(hi + 1)))))
    n, context, p = log_uniform(*mix.questions), log_uniform(*mix.context), 1.0 / (mix.question_extra_mean + 1)
    extra = [int(math.log(1.0 - rng.random()) / math.log(1.0 - p)) for _ in range(n)]
    return context, tuple(min(mix.question_max, mix.question_base + e) for e in extra)


def decision_calls(rate_per_s: float, count: int, seed: int, mix: DecisionMix = DecisionMix()) -> list[DecisionCall]:
    """``count`` calls arriving as a Poisson process of ``rate_per_s``, sizes from ``mix``.

    NOTE: common random numbers: the draws do not depend on the rate (a gap is
    ``Exp(1) / rate``), so two rates give the same calls, arrivals scaled."""
    rng = random.Random(seed)
    t, calls = 0.0, []
    for n in range(count):
        t += -math.log(1.0 - rng.random()) / rate_per_s
        calls.append(DecisionCall(f"d{n}", t, *_sizes(rng, mix)))
    return calls


@dataclass(frozen=True)
class DecisionRecord:
    """One finished call."""

    call_id: str
    arrival_s: float
    finish_s: float
    questions: int
    tokens: int  # its passes computed (contexts computed again included)
    passes: int


def pass_shape(view: PackView, pack: Pack, packed: bool) -> tuple[list[tuple[int, int]], list[tuple[int, int]], int]:
    """``(extends, gaps, extra readout rows)`` of one pass for ``CostModel.prefill_time`` (module docs)."""
    by_id = {r.request_id: r for r in view.pending}
    extends: list[tuple[int, int]] = []
    gaps: list[tuple[int, int]] = []
    rows = 0
    for g in pack.groups:
        r = by_id[g.request_id]
        c, qs = r.context_tokens, [r.tokens_of(i) for i in g.questions]
        if not packed:
            extends += [(q, c) if r.context_cached else (c + q, 0) for q in qs]
            continue
        first, rest = ((qs[0], c), qs[1:]) if r.context_cached else ((c, 0), qs)
        extends.append(first)
        gaps += [(q, c) for q in rest]
        rows += len(qs) - 1  # NOTE: the extend's one head row stands for one question's
    return extends, gaps, rows


def pass_seconds(cost: CostModel, view: PackView, pack: Pack, packed: bool) -> float:
    """One pass's time: ``prefill_time`` of its shape plus the extra readout rows' head FLOPs."""
    extends, gaps, rows = pass_shape(view, pack, packed)
    return cost.prefill_time(extends, gaps, 2 * cost.shape.head_params * rows / cost.prefill_flops_per_s)


@dataclass
class _Call:
    """A held call: what is pending of it, and what it cost so far."""

    call: DecisionCall
    pending: tuple[tuple[int, int], ...]
    cached: bool = False
    tokens: int = 0
    passes: int = 0

    @classmethod
    def admit(cls, call: DecisionCall, extra: int, token_budget: int) -> _Call:
        """A new call as the host holds it; ``ValueError``: refused (``longest_sequence`` > budget)."""
        if call.context_tokens + max(call.question_tokens) + extra > token_budget:
            raise ValueError(f"call {call.call_id}: a question with its context exceeds the budget {token_budget}")
        return cls(call, tuple((i, q + extra) for i, q in enumerate(call.question_tokens)))

    def view(self) -> PendingDecision:
        """The call as the policy sees it (``context_cached`` is the host's knowledge)."""
        c = self.call
        return PendingDecision(c.call_id, c.context_tokens, self.pending, c.arrival_s, self.cached)

    def ran(self, seen: PendingDecision, questions: tuple[int, ...], packed: bool, holds: bool) -> bool:
        """A pass computed ``questions`` (``seen``: the call in its view); whether none is left."""
        self.tokens += sequence_tokens(seen, questions, packed)
        self.passes += 1
        self.pending = tuple(q for q in self.pending if q[0] not in questions)
        self.cached = holds  # NOTE: the pass computed the context: cached iff the host holds it
        return not self.pending


def simulate_decisions(policy: DecisionsPolicy, calls: Sequence[DecisionCall], cost: CostModel, token_budget: int,
                       holds_context: bool = True, layout: Layout = "native",
                       give_up: tuple[float, int] | None = None) -> list[DecisionRecord]:
    """Replay ``calls`` on one server (module docs); records in finishing order. ``give_up=(slo_s,
    late)``: stop once more than ``late`` calls are certain to exceed ``slo_s`` (records then incomplete)."""
    packed, extra = policy.needs.packed_forward, int(layout == "multi_item")
    if extra and not packed:
        raise ValueError("layout='multi_item' packs each call into one sequence: it needs a packed policy")
    holds = holds_context and not extra  # NOTE: multi-item scoring runs with the radix cache off
    order = sorted(calls, key=lambda c: c.arrival_s)
    held: dict[str, _Call] = {}
    records: list[DecisionRecord] = []
    now, nxt = 0.0, 0
    while nxt < len(order) or held:
        if not held:
            now = max(now, order[nxt].arrival_s)  # NOTE: idle: jump to the next arrival
        while nxt < len(order) and order[nxt].arrival_s <= now:
            held[order[nxt].call_id] = _Call.admit(order[nxt], extra, token_budget)
            nxt += 1
        view = PackView(tuple(h.view() for h in held.values()), token_budget, now)
        pack = policy.next_pack(view)
        check_pack(view, pack, packed=packed)
        now += pass_seconds(cost, view, pack, packed)
        seen = {r.request_id: r for r in view.pending}
        for g in pack.groups:
            h = held[g.request_id]
            if h.ran(seen[g.request_id], g.questions, packed, holds):
                del held[g.request_id]
                c = h.call
                records.append(DecisionRecord(c.call_id, c.arrival_s, now, len(c.question_tokens), h.tokens,
                                              h.passes))
        if give_up is not None:  # NOTE: certainly late: finished late, or held and already older
            ages = [r.finish_s - r.arrival_s for r in records] + [now - h.call.arrival_s for h in held.values()]
            if sum(a > give_up[0] for a in ages) > give_up[1]:
                break
    return records


@dataclass(frozen=True)
class DecisionSummary:
    """Latency and throughput of a replay (percentiles: nearest rank)."""

    calls: int
    questions: int
    p50_s: float
    p99_s: float
    questions_per_s: float  # over the span from the first arrival to the last finish
    tokens_per_question: float
    within_slo: bool  # p99 call latency <= the objective


def _rank(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0..1) of sorted ``values``."""
    return values[max(0, math.ceil(q * len(values)) - 1)]


def summarize(records: Sequence[DecisionRecord], slo_s: float) -> DecisionSummary:
    """p50/p99 call latency, questions/s and tokens per question of ``records``."""
    if not records:
        raise ValueError("no records to summarize")
    latency = sorted(r.finish_s - r.arrival_s for r in records)
    questions = sum(r.questions for r in records)
    span = max(r.finish_s for r in records) - min(r.arrival_s for r in records)
    p99 = _rank(latency, 0.99)
    return DecisionSummary(len(records), questions, _rank(latency, 0.5), p99, questions / span,
                           sum(r.tokens for r in records) / questions, p99 <= slo_s)


@dataclass(frozen=True)
class RateResult:
    """The highest arrival rate found within the objective (calls/s; 0: none), and its replay."""

    rate_per_s: float
    summary: DecisionSummary | None


def max_rate_within_slo(policy: DecisionsPolicy, cost: CostModel, token_budget: int, slo_s: float, *,
                        holds_context: bool = True, layout: Layout = "native", mix: DecisionMix = DecisionMix(),
                        seed: int = 0, count: int = 200, start_rate: float = 1.0, steps: int = 10) -> RateResult:
    """The highest arrival rate whose p99 call latency over ``count`` calls (the same at every
    rate: ``decision_calls``) is within ``slo_s``: doubling (or halving) from ``start_rate`` to
    bracket it, then ``steps`` geometric bisections; 0 if none down to ``start_rate / 2**20``."""
    late = count - math.ceil(0.99 * count)

    def probe(rate: float) -> DecisionSummary | None:
        calls = decision_calls(rate, count, seed, mix)
        records = simulate_decisions(policy, calls, cost, token_budget, holds_context, layout, (slo_s, late))
        s = summarize(records, slo_s) if len(records) == count else None
        return s if s is not None and s.within_slo else None

    lo, hi, found, rate, bisected = 0.0, math.inf, None, start_rate, 0
    for _ in range(64 + steps):
        got = probe(rate)
        if got is None:
            hi = rate
        else:
            lo, found = rate, got
        if lo == 0 and hi < start_rate * 2.0 ** -20:
            break  # NOTE: a floor: far below it, arrival times swamp the pass times' precision
        if lo == 0 or hi == math.inf:  # NOTE: bracketing: double up to a miss, halve down to a hit
            rate = hi / 2 if lo == 0 else lo * 2
        elif bisected < steps:
            rate, bisected = math.sqrt(lo * hi), bisected + 1
        else:
            break
    return RateResult(lo, found)


class DecisionsSeam:
    """The decisions kind's seam: it holds the policy and acts on decision calls only,
    replayed by ``simulate_decisions`` (``replay``); ordinary trace requests never
    reach it (it subscribes to none of the simulator's events)."""

    def __init__(self, policy: DecisionsPolicy, token_budget: int) -> None:
        self.policy = policy
        self.token_budget = token_budget  # one pass's prefill budget (``sim.max_prefill_tokens``)

    def replay(self, calls: Sequence[DecisionCall], cost: CostModel, holds_context: bool = True,
               layout: Layout = "native") -> list[DecisionRecord]:
        """``simulate_decisions`` with this seam's policy and budget."""
        return simulate_decisions(self.policy, calls, cost, self.token_budget, holds_context, layout)


class _DecisionsBinding:
    """``+decisions``: the policy that packs decision calls' questions into passes."""

    scope = Scope.replica
    counters: tuple[str, ...] = ()

    def attach(self, spec: PolicySpec, settings: BenchSettings, parts: SimParts) -> None:
        """Build the policy and put its ``DecisionsSeam`` on ``parts.seams``."""
        parts.seams.append(DecisionsSeam(build_policy(spec), settings.sim.max_prefill_tokens))


BINDING = _DecisionsBinding()
