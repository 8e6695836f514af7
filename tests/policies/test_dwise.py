"""DWISE's policy and round estimators on hand-built views (pure)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from policies.feedback import FinishedView, ObservesFinished
from policies.predictors.rounds import ArrivalRoundsRegression, RoundsRefiner, fit_refiner
from policies.scheduling import RoundsNeeds, SchedulingPolicy
from policies.scheduling.dwise import DwisePolicy
from policies.scheduling.rounds import RoundRequestView, RoundsPolicy, RoundView, blocks_left, denoise_rounds_bound
from policies.views import DllmView, RequestView

pytestmark = pytest.mark.policy

B = 4


def req(rid: str, seq: int, prompt: int = 8, max_new: int = 64, out: int = 0, words: int = 5,
        lines: int = 1, denoise: int = 0, waited: int = 0, prompt_blocks_left: int | None = None,
        masks: int = 0, features: tuple[float, ...] | None = None) -> RoundRequestView:
    left = prompt // B if prompt_blocks_left is None else prompt_blocks_left
    return RoundRequestView(
        RequestView(rid=rid, arrival_seq=seq, arrival_time=0.0, num_input_tokens=prompt + out,
                    max_new_tokens=max_new, num_output_tokens=out, features=features),
        DllmView(block_size=B, prompt_blocks_left=left, denoise_rounds=denoise, rounds_waited=waited,
                 masks_left=masks, prompt_words=words, prompt_lines=lines))


def order(policy: DwisePolicy, *requests: RoundRequestView) -> list[str]:
    return list(policy.order_round(RoundView(requests=requests)).order)


def parts(entry: RoundRequestView) -> tuple[RequestView, DllmView]:
    return entry.request, entry.progress


def test_dwise_is_a_diffusion_only_scheduling_policy_that_learns():
    policy = DwisePolicy(slots=8, round_blocks=4)
    assert isinstance(policy, RoundsPolicy) and isinstance(policy, ObservesFinished)
    assert not isinstance(policy, SchedulingPolicy) and not policy.needs.queue
    assert policy.needs.rounds == RoundsNeeds(slots=8, round_blocks=4, denoise_hidden_state=False)
    assert not policy.needs.cache_hits
    for bad in ({"slots": 0}, {"slots": 2, "round_blocks": 3}, {"max_wait_rounds": 0}):
        with pytest.raises(ValueError):
            DwisePolicy(**bad)


def test_work_left_counts_prompt_blocks_and_denoising_rounds_alike():
    policy = DwisePolicy(prior_rounds=10.0)
    # before anything finished every request gets the prior (10 denoising rounds)
    long_prompt = req("a", 0, prompt=80)            # 20 prompt blocks + 10
    mid_way = req("b", 1, prompt=8, denoise=4)      # 2 prompt blocks + 6
    fresh = req("c", 2, prompt=8)                   # 2 + 10
    assert policy.work_left(long_prompt) == pytest.approx(30.0)
    assert policy.work_left(mid_way) == pytest.approx(8.0)
    assert order(policy, long_prompt, mid_way, fresh) == ["b", "c", "a"]


def test_estimates_stay_within_what_max_new_tokens_allows_and_above_one_round():
    policy = DwisePolicy(prior_rounds=100.0)
    aligned = req("a", 0, prompt=8, max_new=4)        # one block of 4 masks: at most 5 rounds
    assert blocks_left(*parts(aligned)) == 1 and denoise_rounds_bound(*parts(aligned)) == 5
    assert policy.work_left(aligned) == 2 + 5         # + its two prompt blocks
    # Rounds of the random tiny model (docs/dwise-notes.md §3.1) never exceed the bound:
    # P=3, N=4: 1 token in the prompt's last block, then a full block: 2 + 5 = 7 rounds.
    for p, n, rounds in [(3, 4, 7), (1, 8, 14), (41, 32, 44 - 41 // 4), (10, 16, 25 - 10 // 4)]:
        fresh = req("f", 1, prompt=p, max_new=n)
        assert denoise_rounds_bound(*parts(fresh)) >= rounds, (p, n)
    overdue = req("o", 1, prompt=0, max_new=64, denoise=150)  # ran past its estimate
    assert policy.work_left(overdue) == 1
    mid_block = req("m", 2, prompt=8, max_new=8, out=4, masks=3)  # its second block is in progress
    assert blocks_left(*parts(mid_block)) == 1


def test_ties_keep_arrival_order_and_the_order_is_a_permutation():
    policy = DwisePolicy()
    rs = [req(f"r{i}", seq) for i, seq in enumerate([3, 1, 2, 0])]
    assert order(policy, *rs) == ["r3", "r1", "r2", "r0"]


def test_aging_moves_a_long_passed_over_request_to_the_front():
    policy = DwisePolicy(max_wait_rounds=5, prior_rounds=10.0)
    long = req("long", 0, prompt=400, waited=4)
    shorts = [req(f"s{i}", i + 1, prompt=0, max_new=4, waited=i % 3) for i in range(6)]
    assert order(policy, long, *shorts)[-1] == "long"
    older = req("older", 0, prompt=400, waited=9)
    long = req("long", 1, prompt=400, waited=5)
    assert order(policy, long, older, *shorts)[:2] == ["older", "long"]


def test_the_arrival_regression_learns_from_finished_requests():
    policy = DwisePolicy(prior_rounds=20.0, forgetting=1.0)
    rng = np.random.default_rng(0)
    for i in range(200):  # long prompts answer long: rounds grow with words and tokens
        words = int(rng.integers(2, 400))
        rounds = int(3 * words ** 0.8)
        policy.observe_finished(FinishedView(rid=str(i), now=0.0, num_input_tokens=int(words * 1.3),
                                             num_output_tokens=rounds, dllm=DllmView(
                                                 block_size=B, prompt_blocks_left=0, denoise_rounds=rounds,
                                                 prompt_words=words, prompt_lines=1)))
    small, big = req("small", 1, prompt=13, words=10), req("big", 0, prompt=390, words=300)
    # within a factor 1.5 of the truth (a log-linear fit of a power law, ridge prior)
    assert abs(math.log(policy.estimate_denoise_rounds(*parts(small)) / (3 * 10 ** 0.8))) < math.log(1.5)
    assert order(policy, big, small) == ["small", "big"]
    frozen = DwisePolicy(online=False)
    frozen.observe_finished(FinishedView(rid="x", now=0.0, num_input_tokens=5, num_output_tokens=5,
                                         dllm=DllmView(block_size=B, prompt_blocks_left=0, denoise_rounds=99)))
    assert frozen.arrival.head.n == 0


def test_arrival_head_saves_and_loads(tmp_path):
    head = ArrivalRoundsRegression(prior_rounds=12.0)
    head.update(10, 2, 30, 40)
    head.update(100, 5, 200, 90)
    head.save(tmp_path / "arrival.npz")
    loaded = ArrivalRoundsRegression(head_path=str(tmp_path / "arrival.npz"))
    assert loaded.predict(50, 3, 80) == pytest.approx(head.predict(50, 3, 80))


def test_the_refiner_is_fitted_deterministically_and_used_once_features_exist(tmp_path):
    rng = np.random.default_rng(0)
    direction = rng.normal(size=16)
    x = rng.normal(size=(300, 16))
    rounds = np.round(np.expm1(3.0 + 0.5 * np.tanh(x @ direction / 4)))
    a, b = fit_refiner(x, rounds, steps=1500, seed=1), fit_refiner(x, rounds, steps=1500, seed=1)
    np.testing.assert_array_equal(a.w1, b.w1)
    test = rng.normal(size=(50, 16))
    truth = np.expm1(3.0 + 0.5 * np.tanh(test @ direction / 4))
    predicted = np.array([a.predict(t) for t in test])
    assert np.corrcoef(np.log1p(predicted), np.log1p(truth))[0, 1] > 0.9
    a.save(tmp_path / "refiner.npz")
    assert RoundsRefiner.load(tmp_path / "refiner.npz").predict(test[0]) == pytest.approx(a.predict(test[0]))
    policy = DwisePolicy(prior_rounds=10.0, refiner_path=str(tmp_path / "refiner.npz"))
    assert policy.needs.rounds is not None and policy.needs.rounds.denoise_hidden_state
    before = req("r", 0, prompt=0, max_new=4096)
    after = req("r", 0, prompt=0, max_new=4096, denoise=1, features=tuple(test[0]))
    assert policy.work_left(before) == pytest.approx(10.0)
    assert policy.work_left(after) == pytest.approx(max(1.0, a.predict(test[0]) - 1))
    assert math.isfinite(policy.work_left(after))


def test_the_max_new_tokens_cap_can_be_switched_off():
    short = req("s", 0, prompt=8, max_new=4)
    assert DwisePolicy(prior_rounds=100.0).work_left(short) == 2 + 5
    assert DwisePolicy(prior_rounds=100.0, cap_by_max_new_tokens=False).work_left(short) == pytest.approx(102.0)
