"""``sglang_adaptive`` chooses the draft length SGLang's own adaptive rule chooses.

SGLang's ``AdaptiveSpeculativeParams`` (``sglang.srt.speculative.adaptive_spec_params``)
needs no worker and no GPU: it takes ``initial_steps`` and an optional JSON
config path (written to ``tmp_path`` for the non-default configs), and
``set_cuda_graph_bs`` for graph padding. The worker's part, driven here by
hand, is what ``EAGLEWorkerV2`` and the batch-result processor do per decode
step: ``get_steps_for_batch(b)`` before it (``AdaptiveController.activate_step_by_batch``)
and ``on_verify_complete(num_correct_drafts_per_req, b)`` after its verify,
where ``num_correct_drafts_per_req`` are accepted drafts without the bonus
token (``accept_lens - 1``), i.e. ``SpecOutcome.accepted``. The twin and SGLang
get the same batch sizes and accepted counts; their lengths (and each slot's
EMA) must be equal at every step.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import random
from pathlib import Path

import pytest
import yaml

from policies.speculative import (
    ObservesSpecOutcome,
    SpecOutcome,
    SpecStepView,
    SpeculationPolicy,
    SpeculativeHostConfig,
    check_decision,
    check_outcome,
)
from policies.speculative.sglang_adaptive import SglangAdaptivePolicy
from tests.conftest import REPO

YAML = REPO / "conf" / "speculative" / "sglang_adaptive.yaml"


@pytest.fixture(scope="module")
def sgl():
    """SGLang's module (the sgl_kernel stand-in first: the PyPI one needs libcuda)."""
    from server.sglang.launch.stub import install_sgl_kernel_stub

    install_sgl_kernel_stub()
    from sglang.srt.speculative import adaptive_spec_params

    return adaptive_spec_params


#: A config exercising what the default leaves at zero: ceiling, up hysteresis,
#: top-level defaults under the slots, and a slot overriding one.
CUSTOM_CONFIG = {
    "ema_alpha": 0.3,
    "update_interval": 3,
    "warmup_batches": 4,
    "down_hysteresis": 0.1,
    "1": {"candidate_steps": [2, 4, 1, 6], "up_hysteresis": 0.2, "ceiling_coeff": 1.5},
    "4": {"candidate_steps": [0, 2, 3], "down_hysteresis": -0.1},
    "16": {"candidate_steps": [1, 0]},
}
GRAPH_BS = [1, 2, 3, 4, 8, 12, 16, 24, 32, 48, 64, 96]


class Pair:
    """SGLang's params and the twin, driven together; asserts at every step."""

    def __init__(self, sgl, tmp_path: Path, config: dict | None = None, initial_steps: int | None = None,
                 cuda_graph_bs: list[int] | None = None) -> None:
        path = None
        if config is not None:
            path = tmp_path / f"adaptive-{len(list(tmp_path.iterdir()))}.json"
            path.write_text(json.dumps(config))
        # SGLang's server args resolve an unset --speculative-num-steps to the middle candidate.
        union = sgl.resolve_candidate_steps_from_config(None if path is None else str(path))
        start = union[len(union) // 2] if initial_steps is None else initial_steps
        self.sglang = sgl.AdaptiveSpeculativeParams(initial_steps=start,
                                                    cfg_path=None if path is None else str(path))
        self.sglang.set_cuda_graph_bs(cuda_graph_bs)
        self.twin = SglangAdaptivePolicy.from_sglang_config(
            sgl.DEFAULT_ADAPTIVE_CONFIG if config is None else config,
            initial_steps=initial_steps, cuda_graph_bs=cuda_graph_bs)
        self.candidates = tuple(range(max(union) + 1))
        self.slot_sizes = sorted(self.sglang._slots)
        self.chosen: list[int] = []

    def ask(self, b: int) -> int:
        want = self.sglang.get_steps_for_batch(b)
        got = self.twin.draft_length(SpecStepView(b, self.candidates, self.chosen[-1] if self.chosen else 0))
        check_decision(SpecStepView(b, self.candidates, 0), self.twin.needs, got)
        assert got.draft_tokens == want, f"step {len(self.chosen)}: b={b} twin {got.draft_tokens}, sglang {want}"
        self.chosen.append(want)
        return want

    def verify(self, b: int, accepted: list[int]) -> None:
        k = self.chosen[-1]
        self.sglang.on_verify_complete(list(accepted), batch_size=b)
        self.twin.observe_step(check_outcome(SpecOutcome(b, k, tuple(accepted))))
        for size in self.slot_sizes:
            slot = self.sglang._slots[size]
            assert self.twin.slot_state(size) == (slot.current_steps, slot.ema_accept_len), f"slot {size}"

    def step(self, b: int, accepted_of) -> int:
        k = self.ask(b)
        self.verify(b, [accepted_of(k) for _ in range(b)])
        return k


def _random_drive(pair: Pair, seed: int, steps: int = 1500) -> None:
    """Bursts of one batch size; per-position acceptance drifting 0..1 and back."""
    rng = random.Random(seed)
    sizes = [1, 2, 3, 5, 8, 9, 13, 16, 20, 31, 32, 33, 50, 64, 65, 100]
    p = rng.random()
    done = 0
    while done < steps:
        b = rng.choice(sizes)
        for _ in range(rng.randint(1, 40)):
            p = min(1.0, max(0.0, p + rng.gauss(0, 0.08)))
            if rng.random() < 0.02:
                p = rng.random()
            pair.step(b, lambda k, p=p: _accepted(rng, p, k))
            done += 1


def _accepted(rng: random.Random, p: float, k: int) -> int:
    """Drafts accepted of ``k``: each position with chance ``p`` once the ones before were."""
    n = 0
    while n < k and rng.random() < p:
        n += 1
    return n


@pytest.mark.parametrize("seed", range(6))
def test_random_sequences_default_config(sgl, tmp_path, seed):
    pair = Pair(sgl, tmp_path)
    _random_drive(pair, seed)
    assert len(set(pair.chosen)) >= 3  # the rule moved, not a flat run


@pytest.mark.parametrize("seed", range(4))
def test_random_sequences_custom_config_graphs_and_initial_steps(sgl, tmp_path, seed):
    pair = Pair(sgl, tmp_path, CUSTOM_CONFIG, initial_steps=[None, 0, 2, 6][seed],
                cuda_graph_bs=GRAPH_BS if seed % 2 else None)
    _random_drive(pair, 100 + seed)
    assert len(set(pair.chosen)) >= 3


def test_default_twin_is_sglangs_default_config(sgl):
    assert SglangAdaptivePolicy() == SglangAdaptivePolicy.from_sglang_config(sgl.DEFAULT_ADAPTIVE_CONFIG)
    # SGLang's starting points: 3 where a candidate, else the slot's middle one.
    twin = SglangAdaptivePolicy()
    assert [twin.slot_state(b)[0] for b in (1, 8, 32, 64)] == [3, 3, 1, 0]


def test_warmup_then_update_interval(sgl, tmp_path):
    """Every draft accepted at b=1: nothing moves in warmup (10) nor until the
    5th verify after it; then 3 -> 5, and 5 -> 7 ten verifies later."""
    pair = Pair(sgl, tmp_path)
    for _ in range(40):
        pair.step(1, lambda k: k)
    assert pair.chosen[:15] == [3] * 15
    assert pair.chosen[15:25] == [5] * 10
    assert pair.chosen[25:] == [7] * 15


def test_rise_then_fall(sgl, tmp_path):
    pair = Pair(sgl, tmp_path)
    for _ in range(40):
        pair.step(1, lambda k: k)
    for _ in range(40):
        pair.step(1, lambda k: 0)
    for _ in range(40):
        pair.step(1, lambda k: k)
    up, down, again = pair.chosen[:40], pair.chosen[40:80], pair.chosen[80:]
    assert up == [3] * 15 + [5] * 10 + [7] * 15
    assert down == [7] * 5 + [5] * 5 + [3] * 5 + [1] * 25  # one candidate per recompute
    assert again == [1] * 5 + [3] * 10 + [5] * 10 + [7] * 15


def test_one_recompute_drops_several_candidates(sgl, tmp_path):
    config = {"ema_alpha": 0.9, "warmup_batches": 0, "1": {"candidate_steps": [1, 3, 5, 7]}}
    pair = Pair(sgl, tmp_path, config, initial_steps=7)
    for _ in range(10):
        pair.step(1, lambda k: k)
    for _ in range(10):
        pair.step(1, lambda k: 0)
    assert pair.chosen == [7] * 15 + [1] * 5


@pytest.mark.parametrize("up, rises", [(0.0, True), (0.3, False)])
def test_up_hysteresis(sgl, tmp_path, up, rises):
    """Mean 2.7 accepted of 3: above 3 - 0.5, below 3 - 0.5 + 0.3."""
    config = {"1": {"candidate_steps": [1, 3, 5], "up_hysteresis": up, "down_hysteresis": 0.0}}
    pair = Pair(sgl, tmp_path, config, initial_steps=3)
    for _ in range(60):
        k = pair.ask(10)
        pair.verify(10, [min(k, a) for a in [3] * 7 + [2] * 3])
    assert (5 in pair.chosen) is rises


@pytest.mark.parametrize("down, falls", [(-0.25, False), (0.0, False), (0.25, True)])
def test_down_hysteresis(sgl, tmp_path, down, falls):
    """Mean 0.6 accepted at 3: above 1 - 0.5 (+ -0.25 or 0), not above 1 - 0.5 + 0.25."""
    config = {"1": {"candidate_steps": [1, 3, 5], "down_hysteresis": down}}
    pair = Pair(sgl, tmp_path, config, initial_steps=3)
    for _ in range(80):
        k = pair.ask(5)
        pair.verify(5, [min(k, a) for a in (3, 0, 0, 0, 0)])
    assert (1 in pair.chosen) is falls


def test_zero_step_slot_probes_up(sgl, tmp_path):
    """b=32 slot [0, 1]: nothing accepted drops it to 0; from 0 it probes 1 again."""
    pair = Pair(sgl, tmp_path)
    for _ in range(60):
        pair.step(40, lambda k: 0)
    assert pair.chosen[0] == 1 and 0 in pair.chosen
    assert sum(a == 0 and b == 1 for a, b in zip(pair.chosen, pair.chosen[1:])) >= 2
    for _ in range(5):
        pair.step(64, lambda k: 0)
    assert pair.chosen[-5:] == [0] * 5  # slot 64: [0] only


@pytest.mark.parametrize("candidates", [(0, 1), (0, 1, 2, 3, 4), (0, 2, 4), (0, 1, 2, 3, 4, 5, 6, 7, 8)])
def test_answers_only_host_candidates(sgl, tmp_path, candidates):
    """Clamped to the largest host candidate <= SGLang's length; SGLang's state unchanged."""
    pair = Pair(sgl, tmp_path)
    twin, sglang = pair.twin, pair.sglang
    assert isinstance(twin, SpeculationPolicy) and isinstance(twin, ObservesSpecOutcome)
    rng = random.Random(len(candidates))
    current = 0
    for i in range(1200):
        b = rng.choice([1, 1, 1, 4, 8, 16, 32, 70])
        p = 1.0 if (i // 200) % 2 == 0 else 0.2
        view = SpecStepView(b, candidates, current)
        decision = check_decision(view, twin.needs, twin.draft_length(view))
        want = sglang.get_steps_for_batch(b)
        assert decision.draft_tokens == max(c for c in candidates if c <= want)
        assert ("clamped" in decision.reason) is (want not in candidates)
        current = decision.draft_tokens
        accepted = [next((j for j in range(current) if rng.random() >= p), current) for _ in range(b)]
        sglang.on_verify_complete(accepted, batch_size=b)
        twin.observe_step(SpecOutcome(b, current, tuple(accepted)))
        assert twin.slot_state(b)[0] == sglang.get_steps_for_batch(b)


def test_yaml_is_the_class_defaults():
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    host = {f.name for f in dataclasses.fields(SpeculativeHostConfig)}
    node = OmegaConf.load(YAML)
    policy = instantiate(OmegaConf.create({k: v for k, v in node.items() if k not in host}))
    assert policy == SglangAdaptivePolicy()
    assert hash(policy) == hash(SglangAdaptivePolicy())
    assert isinstance(policy.candidate_steps, tuple) and isinstance(policy.candidate_steps[0], tuple)
    # And as tests/config spells it: every YAML value is its parameter's default.
    conf = yaml.safe_load(YAML.read_text())
    conf.pop("_target_")
    assert {k: conf.pop(k) for k in host} == {f.name: f.default for f in dataclasses.fields(SpeculativeHostConfig)}
    params = inspect.signature(SglangAdaptivePolicy).parameters
    assert set(conf) == set(params)
    plain = lambda v: [plain(x) for x in v] if isinstance(v, tuple) else v  # noqa: E731
    assert conf == {k: plain(params[k].default) for k in conf}
    fields = {f.name for f in dataclasses.fields(SglangAdaptivePolicy) if f.init}
    assert fields == set(params)


@pytest.mark.parametrize("kwargs, field", [
    ({"batch_sizes": ()}, "batch_sizes"),
    ({"batch_sizes": (1, 1, 2, 3)}, "batch_sizes"),
    ({"batch_sizes": (0, 8, 32, 64)}, "batch_sizes"),
    ({"candidate_steps": ((1,), (0,), (0,))}, "candidate_steps"),
    ({"candidate_steps": ((1,), (), (0,), (0,))}, "candidate_steps"),
    ({"candidate_steps": ((1, -1), (0,), (0,), (0,))}, "candidate_steps"),
    ({"up_hysteresis": (0.0, 0.0)}, "up_hysteresis"),
    ({"down_hysteresis": "x"}, "down_hysteresis"),
    ({"ceiling_coeff": -1.0}, "ceiling_coeff"),
    ({"ema_alpha": 1.5}, "ema_alpha"),
    ({"update_interval": 0}, "update_interval"),
    ({"warmup_batches": -1}, "warmup_batches"),
    ({"initial_steps": 4}, "initial_steps"),
    ({"cuda_graph_bs": (0, 8)}, "cuda_graph_bs"),
])
def test_bad_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SglangAdaptivePolicy(**kwargs)


def test_lists_and_scalars_are_normalised():
    policy = SglangAdaptivePolicy(batch_sizes=[8, 1], candidate_steps=[[3, 0, 1, 1], [7, 1]],
                                  up_hysteresis=0, down_hysteresis=[0, -0.25], ceiling_coeff=0)
    assert policy.batch_sizes == (1, 8)
    assert policy.candidate_steps == ((1, 7), (0, 1, 3))
    assert policy.down_hysteresis == (-0.25, 0.0) and policy.up_hysteresis == (0.0, 0.0)
    hash(policy)
