"""Decision calls in the simulator (``bench/sim/decisions.py``): known passes on
hand-built calls, the clock, the seeded mix, the rate search and the kind's binding."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from bench.config import compose_bench, resolve_bench
from bench.sim import CostModel
from bench.sim.binding import Scope, sim_binding, sim_parts
from bench.sim.decisions import (
    BINDING,
    DecisionCall,
    DecisionMix,
    DecisionsSeam,
    decision_calls,
    max_rate_within_slo,
    simulate_decisions,
    summarize,
)
from bench.sim.events import CountsWork, DraftsDecode, FiltersWalk, GatesArrival, OnBatchFormed, TagsArrival
from compose.kinds import Kind, kind_of, register_kind, unregister_kind
from policies.decisions import DecisionsPolicy
from policies.decisions.flide import FlidePolicy
from policies.decisions.separate import SeparatePolicy

BUDGET = 16384
FCFS, LPM = SeparatePolicy(), SeparatePolicy(in_batch_prefix_caching=True)


@pytest.fixture(scope="module")
def gpu() -> CostModel:
    s = resolve_bench(compose_bench(["accelerator=h100", "model_profile=llama-3.1-8b"]))
    return CostModel(s.accelerator, s.model_profile)


def one(c: int = 1000, n: int = 4, q: int = 10, at: float = 0.0, cid: str = "a") -> DecisionCall:
    return DecisionCall(cid, at, c, (q,) * n)


def head_s(cost: CostModel, rows: int) -> float:
    """The LM-head FLOPs of ``rows`` extra readout rows (the module's stated charge)."""
    return 2 * cost.shape.head_params * rows / cost.prefill_flops_per_s


def test_flide_computes_context_and_questions_in_one_pass(gpu: CostModel) -> None:
    (r,) = simulate_decisions(FlidePolicy(), [one()], gpu, BUDGET)
    assert (r.tokens, r.passes, r.questions) == (1040, 1, 4)
    assert r.finish_s == gpu.prefill_time([(1000, 0)], [(10, 1000)] * 4, head_s(gpu, 3))


def test_separate_fcfs_computes_the_context_per_prompt_in_one_pass(gpu: CostModel) -> None:
    (r,) = simulate_decisions(FCFS, [one()], gpu, BUDGET)
    assert (r.tokens, r.passes) == (4 * 1010, 1)
    assert r.finish_s == gpu.prefill_time([(1010, 0)] * 4)


def test_separate_fcfs_over_two_passes_finds_the_context_cached_only_if_held(gpu: CostModel) -> None:
    (held,) = simulate_decisions(FCFS, [one()], gpu, 2100)
    assert (held.tokens, held.passes) == (2020 + 20, 2)
    assert held.finish_s == gpu.prefill_time([(1010, 0)] * 2) + gpu.prefill_time([(10, 1000)] * 2)
    (hybrid,) = simulate_decisions(FCFS, [one()], gpu, 2100, holds_context=False)
    assert (hybrid.tokens, hybrid.passes) == (4040, 2)


def test_separate_lpm_only_reorders_a_single_call(gpu: CostModel) -> None:
    """SGLang's in-batch prefix caching deprioritises the prompts sharing a prefix; with
    the budget left they still join the pass, each computing the context (as fcfs)."""
    (r,) = simulate_decisions(LPM, [one()], gpu, BUDGET)
    assert (r.tokens, r.passes) == (4 * 1010, 1)
    (tight,) = simulate_decisions(LPM, [one()], gpu, 2100)
    assert (tight.tokens, tight.passes) == (2020 + 20, 2)
    assert tight.finish_s == gpu.prefill_time([(1010, 0)] * 2) + gpu.prefill_time([(10, 1000)] * 2)


def test_multi_item_adds_a_delimiter_per_question_and_never_caches(gpu: CostModel) -> None:
    (r,) = simulate_decisions(FlidePolicy(), [one()], gpu, BUDGET, layout="multi_item")
    assert (r.tokens, r.passes) == (1044, 1)
    assert r.finish_s == gpu.prefill_time([(1000, 0)], [(11, 1000)] * 4, head_s(gpu, 3))
    with pytest.raises(ValueError, match="packed policy"):
        simulate_decisions(FCFS, [one()], gpu, BUDGET, layout="multi_item")


def test_a_pass_takes_what_arrived_before_it_and_an_idle_server_jumps_to_the_next_arrival(gpu: CostModel) -> None:
    t = gpu.prefill_time([(1000, 0)], [(10, 1000)] * 4, head_s(gpu, 3))
    calls = [one(), one(at=t / 2, cid="b"), one(at=100.0, cid="c")]
    a, b, c = simulate_decisions(FlidePolicy(), calls, gpu, BUDGET)
    assert (a.call_id, a.finish_s) == ("a", t)
    assert (b.call_id, b.finish_s) == ("b", 2 * t)  # waited for a's pass, then ran alone
    assert (c.call_id, c.finish_s) == ("c", 100.0 + t)


def test_the_host_refuses_a_question_that_cannot_fit_a_pass_with_its_context(gpu: CostModel) -> None:
    with pytest.raises(ValueError, match="exceeds the budget"):
        simulate_decisions(FlidePolicy(), [one(c=2000)], gpu, 2005)


def test_the_mix_is_seeded_draws_its_stated_ranges_and_scales_with_the_rate() -> None:
    calls = decision_calls(2.0, 2000, seed=3)
    assert calls == decision_calls(2.0, 2000, seed=3) and calls != decision_calls(2.0, 2000, seed=4)
    assert all(4 <= len(c.question_tokens) <= 64 and 1024 <= c.context_tokens <= 8192 for c in calls)
    qs = [q for c in calls for q in c.question_tokens]
    assert min(qs) == 8 and max(qs) == 64 and 22 < sum(qs) / len(qs) < 26
    assert min(len(c.question_tokens) for c in calls) == 4 and max(len(c.question_tokens) for c in calls) == 64
    faster = decision_calls(4.0, 2000, seed=3)  # NOTE: common random numbers: same calls, arrivals halved
    assert [c.question_tokens for c in faster] == [c.question_tokens for c in calls]
    assert all(math.isclose(f.arrival_s, c.arrival_s / 2) for f, c in zip(faster, calls))
    assert 900 < calls[-1].arrival_s < 1100  # 2000 Poisson arrivals at 2 per second
    small = decision_calls(1.0, 200, seed=0, mix=DecisionMix(context=(256, 2048)))
    assert all(256 <= c.context_tokens <= 2048 for c in small)


def test_replays_are_deterministic_and_summarized_by_nearest_rank(gpu: CostModel) -> None:
    calls = decision_calls(5.0, 50, seed=1)
    first = simulate_decisions(FlidePolicy(), calls, gpu, BUDGET)
    assert first == simulate_decisions(FlidePolicy(), calls, gpu, BUDGET)
    s = summarize(first, slo_s=2.0)
    latency = sorted(r.finish_s - r.arrival_s for r in first)
    assert (s.calls, s.p50_s, s.p99_s) == (50, latency[24], latency[49])
    assert s.questions == sum(len(c.question_tokens) for c in calls)
    assert s.tokens_per_question == sum(r.tokens for r in first) / s.questions


def test_flide_sustains_at_least_the_separate_rates_within_the_objective(gpu: CostModel) -> None:
    def rate(policy: DecisionsPolicy, holds: bool) -> float:
        return max_rate_within_slo(policy, gpu, BUDGET, 2.0, holds_context=holds, count=60, steps=6,
                                   mix=DecisionMix(questions=(4, 16), context=(512, 2048))).rate_per_s

    for holds in (True, False):
        flide = rate(FlidePolicy(), holds)
        assert flide > 0 and flide >= rate(FCFS, holds) and flide >= rate(LPM, holds)
    found = max_rate_within_slo(FlidePolicy(), gpu, BUDGET, 2.0, count=60, steps=6)
    assert found.summary is not None and found.summary.within_slo and found.summary.p99_s <= 2.0


DECISIONS = Kind("decisions", "decisions", "DecisionsPolicy", "DecisionsNeeds",
                 "server.sglang.decisions.binding:BINDING", "bench.sim.decisions:BINDING")


@pytest.fixture
def decisions_kind() -> Iterator[None]:
    """The kind, registered for the test unless it already is (the registry entry comes later)."""
    if kind_of("decisions") is not None:
        yield
        return
    register_kind(DECISIONS)
    try:
        yield
    finally:
        unregister_kind("decisions")


@pytest.mark.parametrize(("overrides", "cls", "lpm"), [
    (["+decisions=flide"], FlidePolicy, None),
    (["+decisions=separate", "decisions.in_batch_prefix_caching=true"], SeparatePolicy, True),
])
def test_the_binding_attaches_a_seam_holding_the_composed_policy(decisions_kind: None, overrides: list[str],
                                                                 cls: type, lpm: bool | None) -> None:
    settings = resolve_bench(compose_bench(overrides))
    kind = kind_of("decisions")
    assert kind is not None and sim_binding(kind) is BINDING and BINDING.scope is Scope.replica
    parts = sim_parts(settings, Scope.replica)
    (seam,) = parts.seams
    assert isinstance(seam, DecisionsSeam) and isinstance(seam.policy, cls)
    assert seam.token_budget == settings.sim.max_prefill_tokens
    if isinstance(seam.policy, SeparatePolicy):
        assert seam.policy.in_batch_prefix_caching is lpm
    # NOTE: it subscribes to none of the simulator's events: trace requests never reach it
    faces = (TagsArrival, GatesArrival, FiltersWalk, OnBatchFormed, DraftsDecode, CountsWork)
    assert not any(isinstance(seam, f) for f in faces) and BINDING.counters == ()
    cost = CostModel(settings.accelerator, settings.model_profile)
    assert seam.replay([one()], cost) == simulate_decisions(seam.policy, [one()], cost, seam.token_budget)
