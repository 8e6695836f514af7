"""The public LEAP prompt set and the offline predictor replay (bench/leap/public.py, predictors.py)."""

from __future__ import annotations

import json
import math
import zipfile

import numpy as np
import pytest

from bench.leap.predictors import (
    RIDGES,
    Logged,
    best_ridge,
    judge,
    online,
    prompt_length_features,
    replay_gap,
    ridge_sweep,
    trained_head,
)
from bench.leap.public import MAX_CHARS, public_prompts, split_of
from bench.leap.transfer import ErrorModel, error_models, rank_matched_std, signal_spearman
from bench.scripts.leap_curve import spearman


def _chat(system: str, user: str) -> dict:
    return {"input": [{"role": "system", "content": system}, {"role": "user", "content": user}], "ideal": "x"}


def _wheel(tmp_path, evals: dict[str, list[object]]):
    path = tmp_path / "evals.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, samples in evals.items():
            lines = "\n".join(s if isinstance(s, str) else json.dumps(s) for s in samples)
            z.writestr(f"evals/registry/data/{name}/samples.jsonl", lines + "\n")
        z.writestr("evals/registry/evals/other.yaml", "not data")
    return path


def test_split_is_by_eval_and_every_sample_is_a_chat_that_fits(tmp_path):
    names = [f"eval_{i}" for i in range(40)]
    evals = {n: [_chat("sys", f"{n} q{k}") for k in range(5)] for n in names}
    evals["eval_0"] += ["not json", {"input": "a bare string"}, _chat("s", "x" * MAX_CHARS)]
    wheel = _wheel(tmp_path, evals)
    train, held = public_prompts("train", wheel=wheel, per_eval=2), public_prompts("eval", wheel=wheel)
    assert {p.eval_name for p in train}.isdisjoint({p.eval_name for p in held})
    assert {p.eval_name for p in train} | {p.eval_name for p in held} == set(names)
    assert all(split_of(p.eval_name) == p.split for p in train + held)
    assert len(train) == 2 * len({p.eval_name for p in train}) and len(held) == len({p.eval_name for p in held})
    for p in train + held:
        assert p.messages[1][1].startswith(p.eval_name + " q")  # an eval's own sample, never a long or broken one
        assert sum(len(c) for _, c in p.messages) <= MAX_CHARS
    assert len({p.messages for p in train}) == len(train)  # distinct samples per eval
    assert public_prompts("eval", wheel=wheel, seed=0) == held
    assert public_prompts("eval", wheel=wheel, seed=1) != held
    assert held[0].openai_messages()[1] == {"role": "user", "content": held[0].messages[1][1]}
    with pytest.raises(ValueError, match="split"):
        public_prompts("test", wheel=wheel)


def _logged(n: int, rng) -> list[Logged]:
    out = []
    for i in range(n):
        prompt = int(rng.integers(5, 500))
        true = int(max(1, prompt // 3 + rng.integers(0, 5)))
        out.append(Logged(f"r{i}", "e", "eval", [], prompt, true, (math.log1p(true), 1.0), 0.0))
    return out


def test_online_replay_predicts_before_it_learns():
    rng = np.random.default_rng(0)
    records = _logged(200, rng)
    true = [r.num_output_tokens for r in records]
    # NOTE: a weak prior (ridge 1) so that 100 requests suffice to learn the length
    pred = online(prompt_length_features(records), true, ridge=1.0)
    assert pred[0] == pytest.approx(64.0)  # LEAP's prior before any update
    # the length is a function of the prompt here: the head learns it
    late = judge(pred, np.array(true), np.arange(200) >= 100, cap=10_000)
    assert late["spearman"] > 0.95 and late["log_error_std"] < 0.2
    # a prediction never sees its own answer: swapping a request's length changes later predictions only
    changed = online(prompt_length_features(records), [*true[:50], true[50] * 7, *true[51:]], ridge=1.0)
    assert np.array_equal(changed[:51], pred[:51]) and not np.array_equal(changed[51:], pred[51:])


def test_replay_gap_measures_the_servers_logged_predictions():
    rng = np.random.default_rng(1)
    records = _logged(50, rng)
    replay = online([r.features for r in records], [r.num_output_tokens for r in records])
    learned = [(r.features, r.num_output_tokens, float(p)) for r, p in zip(records, replay)]
    assert replay_gap(learned) == 0.0
    # the server learned from one more request first (a warm-up): a replay without it drifts
    assert replay_gap(learned[1:]) > 0.01
    learned[10] = (learned[10][0], learned[10][1], learned[10][2] * 1.5)
    assert replay_gap(learned) == pytest.approx(1 / 3)


def test_judge_reports_the_log_error_model_and_the_uncapped_ranks():
    true = np.array([10, 20, 40, 80, 200, 200] * 5)
    pred = true * math.e ** 0.5
    j = judge(pred, true, np.ones(len(true), bool), cap=200)
    assert j["log_error_mean"] == pytest.approx(0.5) and j["log_error_std"] == pytest.approx(0.0, abs=1e-12)
    assert j["spearman"] == pytest.approx(1.0) and j["uncapped"] == 20


def test_rank_matched_std_gives_the_live_spearman_on_the_trace():
    rng = np.random.default_rng(2)
    outputs = [(f"r{i}", int(n)) for i, n in enumerate(np.exp(rng.uniform(0, 7, 3000)).astype(int) + 1)]
    for target in (0.8, 0.5, 0.25):
        std = rank_matched_std(outputs, target, mean=-0.1)
        assert signal_spearman(outputs, std, -0.1) == pytest.approx(target, abs=0.01)
    # a wider trace needs more noise for the same rank quality: log-error does not carry ranks over
    narrow = [(rid, 1 + n % 50) for rid, n in outputs]
    assert rank_matched_std(narrow, 0.5, 0.0) < rank_matched_std(outputs, 0.5, 0.0)
    assert rank_matched_std(outputs, 1.0, 0.0) == 0.0


def test_error_models_carry_each_predictors_live_error():
    found = {"judged": {"LEAP head": {"log_error_mean": -0.3, "log_error_std": 1.6, "spearman": 0.26},
                        "proxy model": {"log_error_mean": 0.1, "log_error_std": 1.9, "spearman": 0.2}}}
    models = error_models(found, {"log_error_mean": -0.1, "log_error_std": 0.55})
    assert models[0] == ErrorModel("LEAP head, templated set", -0.1, std=0.55)
    assert ErrorModel("proxy model, public set", 0.1, std=1.9) in models
    assert ErrorModel("LEAP head, public set, rank-matched", -0.3, target_spearman=0.26) in models
    with pytest.raises(ValueError, match="not both"):
        ErrorModel("x", 0.0, std=1.0, target_spearman=0.5)


def test_trained_head_is_the_replayed_head():
    records = _logged(60, np.random.default_rng(3))
    features, true = prompt_length_features(records), [r.num_output_tokens for r in records]
    # the head after learning the first 59 predicts the 60th as the online replay did
    assert trained_head(features[:59], true[:59]).predict(features[59]) == pytest.approx(online(features, true)[59])


def test_ridge_sweep_prefers_the_prior_that_ranks_the_train_requests_best():
    # NOTE: many noisy features and few requests: a weak prior (small ridge) overfits
    # the early requests, so some stronger prior must rank better than the weakest.
    rng = np.random.default_rng(3)
    x = rng.normal(size=(120, 40))
    y = np.exp(3 + 0.8 * x[:, 0] + rng.normal(scale=0.3, size=120)).round().astype(int) + 1
    sweep = ridge_sweep(x.tolist(), y.tolist())
    assert set(sweep) == set(RIDGES)
    chosen = best_ridge(sweep)
    assert sweep[chosen] >= max(sweep.values()) - 0.005
    assert chosen > min(RIDGES) and sweep[chosen] > sweep[min(RIDGES)] + 0.05
    # each cell is the online replay with that ridge, ranked by the tables' own Spearman
    assert all(sweep[r] == spearman(online(x.tolist(), y.tolist(), r), y) for r in RIDGES)


def test_best_ridge_breaks_a_near_tie_towards_the_weaker_prior():
    assert best_ridge({1.0: 0.40, 10.0: 0.437, 100.0: 0.44, 1000.0: 0.41}) == 10.0
    assert best_ridge({1.0: 0.40, 10.0: 0.42, 100.0: 0.44}) == 100.0
