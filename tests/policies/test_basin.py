"""Basin and its lifetime predictor on hand-built views (pure)."""

from __future__ import annotations

import pytest

from policies.admission import AdmissionAction, AdmissionView
from policies.admission.basin import BasinPolicy
from policies.admission.lifetime import SessionLifetimePredictor, SessionSample, quantile
from policies.feedback import FinishedView
from policies.views import RequestView

CAPACITY = 10_000


def view(rid: str, session: str | None, prompt: int, now: float, max_new: int = 0) -> AdmissionView:
    r = RequestView(rid=rid, arrival_seq=0, arrival_time=now, num_input_tokens=prompt,
                    max_new_tokens=max_new, session_id=session)
    return AdmissionView(request=r, now=now, num_waiting=0, num_running=0,
                         kv_capacity_tokens=CAPACITY, kv_free_tokens=CAPACITY)


def finished(rid: str, session: str | None, prompt: int, out: int, now: float, cached: int = 0) -> FinishedView:
    return FinishedView(rid=rid, now=now, num_input_tokens=prompt, num_output_tokens=out,
                        num_cached_tokens=cached, session_id=session)


def test_quantile_is_nearest_rank():
    assert quantile([1, 2, 3, 4, 5], 0.8) == 4 and quantile([7], 0.5) == 7


def test_predictor_prior_then_learned_ratio_and_growth():
    p = SessionLifetimePredictor(quantile=0.5, min_history=2, prior_growth=3.0)
    assert p.predict(100, 100, 1) == 300  # prior
    p.learn(SessionSample(first_context=100, max_context=400, turns=4))  # growth 100/turn
    p.learn(SessionSample(first_context=200, max_context=1000, turns=5))  # growth 200/turn
    # ratio median 4 -> 4 * c0; growth: first turn -> median growth 100 x median turns left (3)
    assert p.predict(100, 100, 1) == 400
    # turn 3 at 700 tokens, own growth 300/turn, sessions with >= 3 turns have 1 or 2 left (q=0.5 -> 1)
    assert p.predict(100, 700, 3) == 1000


def test_admitted_sessions_are_never_held_and_reservations_grow():
    b = BasinPolicy(budget_fraction=0.5, min_budget_fraction=0.1, prior_growth=2.0)
    assert b.decide(view("a1", "A", 2000, 0)).action is AdmissionAction.ADMIT  # reserves 4000 <= 5000
    assert b.reserved == 4000
    assert b.decide(view("b1", "B", 2000, 1)).action is AdmissionAction.DEFER  # 8000 > 5000
    # session A keeps growing past its reservation: admitted, reservation corrected upward
    b.observe_finished(finished("a1", "A", 2000, 500, 2))
    assert b.decide(view("a2", "A", 4600, 3)).action is AdmissionAction.ADMIT
    assert b.reserved >= 4600


def test_held_sessions_are_admitted_oldest_first_when_budget_frees():
    b = BasinPolicy(budget_fraction=0.5, min_budget_fraction=0.1, prior_growth=2.0, idle_timeout_s=10)
    b.decide(view("a1", "A", 2000, 0))
    assert b.decide(view("b1", "B", 1000, 1)).action is AdmissionAction.DEFER
    assert b.decide(view("c1", "C", 100, 2)).action is AdmissionAction.DEFER  # fits, but B is older
    b.observe_finished(finished("a1", "A", 2000, 100, 3))
    b.end_session("A", 4)
    assert b.reserved == 0
    assert b.decide(view("c1", "C", 100, 5)).action is AdmissionAction.DEFER  # still behind B
    assert b.decide(view("b1", "B", 1000, 5)).action is AdmissionAction.ADMIT
    assert b.decide(view("c1", "C", 100, 5)).action is AdmissionAction.ADMIT


def test_held_too_long_or_too_many_are_rejected_with_retry_after():
    b = BasinPolicy(budget_fraction=0.5, min_budget_fraction=0.1, prior_growth=2.0,
                    max_held=1, max_wait_s=30, retry_after_s=7)
    b.decide(view("a1", "A", 2400, 0))
    assert b.decide(view("b1", "B", 2400, 1)).action is AdmissionAction.DEFER
    over = b.decide(view("c1", "C", 2400, 2))
    assert over.action is AdmissionAction.REJECT and over.retry_after_s == 7 and "max_held=1" in over.reason
    late = b.decide(view("b1", "B", 2400, 40))
    assert late.action is AdmissionAction.REJECT and "max_wait_s=30" in late.reason
    assert not b.held


def test_idle_sessions_end_and_teach_the_predictor():
    b = BasinPolicy(idle_timeout_s=10)
    b.decide(view("a1", "A", 100, 0))
    b.observe_finished(finished("a1", "A", 100, 50, 1))
    b.decide(view("x1", "X", 100, 20))  # A idle for 19 s: ended
    assert "A" not in b.sessions and list(b.predictor.samples) == [SessionSample(100, 150, 1)]


def test_requests_without_session_end_when_they_finish():
    b = BasinPolicy()
    b.decide(view("r1", None, 300, 0, max_new=100))
    assert b.reserved > 0
    b.observe_finished(finished("r1", None, 300, 100, 1))
    assert b.reserved == 0 and not b.sessions


def test_budget_shrinks_when_history_is_recomputed_and_grows_back_when_healthy():
    b = BasinPolicy(budget_fraction=0.9, adapt_interval_s=10, shrink_factor=0.5, grow_step=0.1,
                    unhealthy_miss_rate=0.2, healthy_miss_rate=0.05, min_budget_fraction=0.3)
    b.decide(view("a1", "A", 1000, 0))
    b.observe_finished(finished("a1", "A", 1000, 100, 1))
    b.decide(view("a2", "A", 1200, 2))
    b.observe_finished(finished("a2", "A", 1200, 100, 11, cached=0))  # all 1100 history tokens missed
    assert b.budget_fraction == pytest.approx(0.45)
    b.decide(view("a3", "A", 1400, 12))
    b.observe_finished(finished("a3", "A", 1400, 100, 22, cached=1300))  # healthy, but nothing held
    assert b.budget_fraction == pytest.approx(0.45)  # a budget that does not bind does not grow
    b.decide(view("a4", "A", 1600, 23))
    assert b.decide(view("b1", "B", CAPACITY, 24)).action is AdmissionAction.DEFER  # it binds
    b.observe_finished(finished("a4", "A", 1600, 100, 34, cached=1500))  # healthy
    assert b.budget_fraction == pytest.approx(0.55)


def test_rejects_inconsistent_parameters():
    with pytest.raises(ValueError):
        BasinPolicy(budget_fraction=0.2, min_budget_fraction=0.3)


def test_miss_rate_is_judged_against_the_workloads_own_floor():
    """Misses no admission level avoids (a steady 90%) shrink the budget once, then not again."""
    b = BasinPolicy(budget_fraction=1.0, adapt_interval_s=10, shrink_factor=0.5, min_budget_fraction=0.1)
    t = 0.0
    for i in range(6):
        b.decide(view(f"a{i}", "A", 1000 + 100 * i, t))
        b.observe_finished(finished(f"a{i}", "A", 1000 + 100 * i, 100, t + 11, cached=100))  # ~90% missed
        t += 12
    assert b.budget_fraction == pytest.approx(0.5)
