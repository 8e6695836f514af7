"""LEAP's policy and RLS head on hand-built views and synthetic features (pure)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from policies.feedback import FinishedView
from policies.predictors import LengthPredictor
from policies.predictors.rls import RlsLengthHead
from policies.scheduling import QueueView
from policies.scheduling.leap import LeapPolicy
from policies.views import RequestView


def test_rls_head_recovers_a_linear_log_length_model():
    rng = np.random.default_rng(0)
    true_w = rng.normal(size=8)
    head = RlsLengthHead(dim=8, forgetting=1.0, ridge=1.0)
    assert isinstance(head, LengthPredictor)
    for _ in range(400):
        x = rng.normal(size=8)
        head.update(x, int(round(math.expm1(2.0 + 0.3 * (true_w @ x)))))
    x = rng.normal(size=8)
    assert abs(math.log1p(head.predict(x)) - (2.0 + 0.3 * (true_w @ x))) < 0.1


def test_rls_head_predicts_many_as_it_predicts_one():
    rng = np.random.default_rng(1)
    head = RlsLengthHead(dim=5)
    for _ in range(50):
        x = rng.normal(size=5)
        head.update(x, int(rng.integers(1, 500)))
    xs = rng.normal(size=(7, 5))
    assert head.predict_many(xs) == pytest.approx([head.predict(x) for x in xs])
    with pytest.raises(ValueError):
        head.predict_many(xs[:, :4])


def test_rls_head_round_trips_through_a_file(tmp_path):
    head = RlsLengthHead(dim=3)
    for i in range(20):
        head.update([i, -i, 1.0], 10 + i)
    head.save(tmp_path / "h.npz")
    again = RlsLengthHead.load(tmp_path / "h.npz")
    assert again.predict([3, -3, 1.0]) == pytest.approx(head.predict([3, -3, 1.0]))


def view(rid: str, seq: int, features=None, generated: int = 0, arrived: int = 0) -> RequestView:
    return RequestView(rid=rid, arrival_seq=seq, arrival_time=0.0, num_input_tokens=10,
                       num_output_tokens=generated, features=features, arrival_processed_tokens=arrived)


def test_leap_orders_shortest_predicted_remaining_first_with_aging():
    policy = LeapPolicy(feature_dim=2, aging_tokens=1000.0, prior_tokens=50.0)
    for _ in range(200):  # feature 0 encodes the length: 1.0 -> long, -1.0 -> short
        policy.observe_finished(FinishedView("x", 0.0, 10, 400, features=(1.0, 0.0)))
        policy.observe_finished(FinishedView("y", 0.0, 10, 5, features=(-1.0, 0.0)))
    queue = QueueView((view("long", 0, (1.0, 0.0)), view("fresh", 1), view("short", 2, (-1.0, 0.0))))
    assert policy.order(queue).order == ("short", "fresh", "long")
    # generated tokens count against the prediction: 395 of ~400 done -> ~5 left
    queue = QueueView((view("long", 0, (1.0, 0.0), generated=395), view("fresh", 1)))
    assert policy.order(queue).order[0] == "long"
    # aging: the long one has waited 1M prefill tokens
    queue = QueueView((view("long", 0, (1.0, 0.0), arrived=0), view("short", 1, (-1.0, 0.0), arrived=10**6)),
                      processed_tokens=10**6)
    assert policy.order(queue).order[0] == "long"


def test_aborted_requests_teach_nothing():
    policy = LeapPolicy(feature_dim=2)
    before = policy.predictor.predict((1.0, 0.0))
    policy.observe_finished(FinishedView("x", 0.0, 10, 999, aborted=True, features=(1.0, 0.0)))
    assert policy.predictor.predict((1.0, 0.0)) == before and policy.prior_tokens == pytest.approx(64.0)


def test_prompt_length_regression_reads_the_prompt_length_only():
    policy = LeapPolicy(features="prompt_length", aging_tokens=1e12)
    assert not policy.needs.prompt_embedding and policy.needs.hidden_state_layer is None
    for _ in range(100):  # long prompts get short answers here
        policy.observe_finished(FinishedView("a", 0.0, 1000, 5))
        policy.observe_finished(FinishedView("b", 0.0, 10, 300))
    queue = QueueView((
        RequestView(rid="short-prompt", arrival_seq=0, arrival_time=0.0, num_input_tokens=10, features=(9.0,)),
        RequestView(rid="long-prompt", arrival_seq=1, arrival_time=0.0, num_input_tokens=1000)))
    assert policy.order(queue).order == ("long-prompt", "short-prompt")  # captured features are ignored
    assert policy.predictor.predict((math.log1p(1000),)) == pytest.approx(5, rel=0.1)
    with pytest.raises(ValueError, match="features"):
        LeapPolicy(features="proxy")
    with pytest.raises(ValueError, match="hidden_state_layer"):
        LeapPolicy(features="prompt_length", hidden_state_layer=3)
