"""Speculation policies against a stated world: step times and acceptance known.

The world: a step of ``b`` requests drafting ``k`` costs ``T(b, k) = fixed +
per_token * b * (k + 1)`` seconds (memory-bound at small ``b``, compute-bound
at large ``b``), and each draft position is accepted with probability ``p``
given the ones before were (geometric), drawn from a seeded generator. The
best length at each batch size is computed from the formulas, independently
of the policy's estimates.
"""

from __future__ import annotations

import random

import pytest

from policies.speculative import (
    DraftDecision,
    ObservesSpecOutcome,
    SpecOutcome,
    SpecStepView,
    SpeculationPolicy,
    SpeculativeHostConfig,
    StepTimeTable,
    TakesStepTable,
    check_decision,
    check_outcome,
)
from policies.speculative.static import StaticPolicy
from policies.speculative.table import TablePolicy
from policies.speculative.tabletune import TableTunePolicy

CANDIDATES = (0, 1, 2, 3, 4)


class World:
    def __init__(self, p: float, fixed: float = 0.010, per_token: float = 0.0004, seed: int = 0) -> None:
        self.p, self.fixed, self.per_token = p, fixed, per_token
        self.rng = random.Random(seed)

    def step_time(self, b: int, k: int) -> float:
        return self.fixed + self.per_token * b * (k + 1)

    def expected_tokens(self, k: int) -> float:
        return sum(self.p ** j for j in range(k + 1))

    def goodput(self, b: int, k: int) -> float:
        return b * self.expected_tokens(k) / self.step_time(b, k)

    def best(self, b: int) -> int:
        return max(CANDIDATES, key=lambda k: self.goodput(b, k))

    def accepted(self, k: int) -> int:
        n = 0
        while n < k and self.rng.random() < self.p:
            n += 1
        return n

    def run(self, policy, b: int, steps: int, current: int = 0) -> tuple[float, float, list[int]]:
        """Tokens and seconds of ``steps`` steps at batch size ``b``, and the lengths chosen."""
        tokens = seconds = 0.0
        chosen = []
        for _ in range(steps):
            view = SpecStepView(decode_batch_size=b, candidates=CANDIDATES, current=current)
            k = check_decision(view, policy.needs, policy.draft_length(view)).draft_tokens
            accepted = tuple(self.accepted(k) for _ in range(b))
            t = self.step_time(b, k)
            if isinstance(policy, ObservesSpecOutcome):
                policy.observe_step(check_outcome(SpecOutcome(b, k, accepted, t)))
            tokens += b + sum(accepted)
            seconds += t
            chosen.append(k)
            current = k
        return tokens, seconds, chosen


def test_the_world_has_a_length_that_pays_alone_and_none_under_load():
    world = World(p=0.7)
    assert world.best(1) >= 3 and world.best(64) == 0


def test_static_and_table_answer_their_lengths():
    assert StaticPolicy(2).draft_length(SpecStepView(5, CANDIDATES, 0)) == DraftDecision(2, "static")
    assert StaticPolicy(2).needs.draft_lengths == (2,)
    table = TablePolicy([[1, 1, 3], [2, 4, 2], [9, 16, 0]])
    got = [table.draft_length(SpecStepView(b, CANDIDATES, 0)).draft_tokens for b in (1, 2, 4, 5, 9, 17)]
    assert got == [3, 2, 2, 0, 0, 0]
    assert table.needs.draft_lengths == (0, 2, 3)


@pytest.mark.parametrize("ranges", [[[1, 4, 2], [4, 8, 1]], [[0, 4, 2]], [[1, 4]], [[3, 2, 1]], [[1, 2, -1]]])
def test_a_malformed_table_is_refused(ranges):
    with pytest.raises(ValueError, match="ranges"):
        TablePolicy(ranges)


def test_hosts_refuse_lengths_they_cannot_run_and_impossible_outcomes():
    view = SpecStepView(1, (0, 1, 2), 0)
    with pytest.raises(ValueError, match="not one of"):
        check_decision(view, StaticPolicy(3).needs, DraftDecision(3))
    with pytest.raises(ValueError, match="outside its needs"):
        check_decision(view, StaticPolicy(2).needs, DraftDecision(1))
    with pytest.raises(ValueError, match="outside 0..2"):
        check_outcome(SpecOutcome(1, 2, (3,)))
    with pytest.raises(ValueError, match="batch of 2"):
        check_outcome(SpecOutcome(2, 2, (1,)))
    with pytest.raises(ValueError, match="max_draft_tokens"):
        SpeculativeHostConfig(max_draft_tokens=0)
    with pytest.raises(ValueError, match="algorithm"):
        SpeculativeHostConfig(algorithm="MEDUSA")
    with pytest.raises(ValueError, match="given twice"):
        StepTimeTable(((1, 0, 0.1), (1, 0, 0.2)))


def test_every_option_is_a_speculation_policy_and_tabletune_has_both_faces():
    for policy in (StaticPolicy(), TablePolicy(), TableTunePolicy()):
        assert isinstance(policy, SpeculationPolicy)
    assert isinstance(TableTunePolicy(), ObservesSpecOutcome) and isinstance(TableTunePolicy(), TakesStepTable)
    assert TableTunePolicy().needs.step_timing


@pytest.mark.parametrize("p", [0.3, 0.6, 0.85])
@pytest.mark.parametrize("b", [1, 4, 16, 64])
def test_tabletune_learns_the_best_length_and_stays_within_3_percent_of_it(p, b):
    world = World(p=p, seed=b)
    policy = TableTunePolicy()
    policy_tokens, policy_s, chosen = world.run(policy, b, 2000)
    best = world.best(b)
    # The settled choice is the best length, or one within the switching margin of it.
    settled = max(set(chosen[-200:]), key=chosen[-200:].count)
    assert world.goodput(b, settled) >= world.goodput(b, best) / (1 + policy.margin) - 1e-9
    oracle_tokens, oracle_s, _ = World(p=p, seed=b).run(StaticPolicy(best), b, 2000)
    assert policy_tokens / policy_s >= 0.97 * oracle_tokens / oracle_s


def test_the_guard_turns_drafting_off_when_nothing_is_accepted():
    world = World(p=0.0)
    _, _, chosen = world.run(TableTunePolicy(), 1, 500)
    assert chosen[-100:].count(0) >= 98  # 0 but for its probes of k=1


def test_a_change_of_traffic_moves_the_table_within_a_few_hundred_steps():
    policy = TableTunePolicy()
    World(p=0.9, seed=1).run(policy, 2, 1000)
    assert policy.table()[2] == World(p=0.9).best(2) >= 3
    world = World(p=0.02, seed=2)
    _, _, chosen = world.run(policy, 2, 1500)
    assert world.best(2) == 0 and chosen[-100:].count(0) >= 98


def test_a_seeded_table_skips_the_first_probes_and_picks_its_best_at_once():
    world = World(p=0.6)
    rows = tuple((b, k, world.step_time(b, k)) for b in (1, 8, 64) for k in CANDIDATES)
    policy = TableTunePolicy(prior_accept=0.6, prior_weight=50.0)
    policy.seed_step_times(StepTimeTable(rows))
    for b in (1, 8, 64):
        first = policy.draft_length(SpecStepView(b, CANDIDATES, 0))
        assert first == DraftDecision(world.best(b), "guard" if world.best(b) == 0 else "goodput")


def test_tabletune_is_deterministic_given_its_outcomes():
    runs = [World(p=0.5, seed=7).run(TableTunePolicy(), 8, 600)[2] for _ in range(2)]
    assert runs[0] == runs[1]
