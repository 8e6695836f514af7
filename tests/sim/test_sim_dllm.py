"""The dLLM simulator (``bench/sim/dllm``) against docs/dwise-notes.md's observations.

Round cost ``NOTES_COST`` (30 ms per block: the busy machine the notes' runs
were recorded on, docs/dwise-notes.md §3.2), block size 4,
``tiny_live`` rounds (a block with ``k`` masks takes ``k + 1`` rounds) unless a
test says otherwise. Arrival assumption for the notes' concurrent experiments:
"sent 50 ms apart" in the order the notes list them, at 0, 50, 100 (, 150) ms;
with 30 ms per block that puts mid's arrival in round 2 (it joins round 3) and
short's in round 3 (it joins round 4), which is what the notes' per-round
``#new-seq`` counts show.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from omegaconf import OmegaConf

from bench.config import compose_bench, resolve_bench
from bench.metrics import Slo, summarize
from bench.run import run_bench
from bench.schema import AcceleratorConfig, ModelProfileConfig
from bench.sim.cost import CostModel
from bench.sim.dllm import (
    Confidence,
    DllmParams,
    DllmSimulator,
    LinearRoundCost,
    OracleDwise,
    RooflineRoundCost,
    Table,
    TinyLive,
    block_plan,
    records_of,
    tiny_live_rounds,
)
from bench.sim.dllm.blocks import RoundsModel, request_rng
from bench.sim.engine import SimulationError
from bench.traces.paths import default_data_root
from compose.config import CONF_DIR, ConfigError
from policies.scheduling import SchedulingPolicy
from policies.scheduling.dwise import DwisePolicy
from policies.scheduling.fcfs import FcfsPolicy
from policies.scheduling.shortest_prefill import ShortestPrefillPolicy
from tests.data import needs_data
from tests.sim.helpers import req, trace_of

B = 4
#: NOTE: the notes' arrival timings (50 ms apart) land in the rounds they report only at their
#: machine's round cost; the measured default (``cpu_tiny``, a quiet machine) is much faster.
NOTES_COST = LinearRoundCost(0.0, 0.030)


def sim_of(requests, slots, round_blocks=None, policy: SchedulingPolicy | None = None,
           rounds: RoundsModel | None = None, **kw) -> DllmSimulator:
    params = DllmParams(B, slots, round_blocks or slots, rounds or TinyLive(), NOTES_COST, **kw)
    sim = DllmSimulator(trace_of(requests), params, policy, check_every_round=True)
    sim.run()
    return sim


def finish_rounds(sim: DllmSimulator) -> dict[str, int | None]:
    return {r.rid: r.finish_round for r in sim.requests.values()}


def runs(sizes) -> list[tuple[int, int]]:
    """Per-round block counts as (count, rounds in a row), like the notes' ``#new-seq`` runs."""
    return [(k, len(list(g))) for k, g in itertools.groupby(sizes)]


# ---------------------------------------------------------------- (i) one request alone

#: docs/dwise-notes.md §3.1, observed with B = 4, one request at a time: (P, C per N) -> rounds per N.
NOTES_TABLE = {
    (1, (0, 0, 0, 0, 0, 0)): (4, 9, 9, 14, 24, 44),
    (10, (0, 2, 2, 2, 2, 2)): (5, 8, 8, 13, 23, 43),
    (41, (0, 10, 10, 10, 10, 10)): (14, 9, 9, 14, 24, 44),
}
NS = (1, 4, 5, 8, 16, 32)


def test_closed_form_matches_every_observed_request():
    for (p, cached), observed in NOTES_TABLE.items():
        assert [tiny_live_rounds(p, n, B, c) for n, c in zip(NS, cached)] == list(observed)
    # the same 7-token prompt with N = 16: 23 rounds, 22 with one block cached
    assert (tiny_live_rounds(7, 16, B), tiny_live_rounds(7, 16, B, 1)) == (23, 22)


@pytest.mark.parametrize(("p", "n", "rounds"), [(1, 32, 44), (10, 16, 25), (41, 1, 14), (3, 4, 7), (8, 12, 17)])
def test_one_request_alone_takes_the_closed_form_rounds(p, n, rounds):
    # NOTE: uncached (the simulator has no prefix cache): P=10, N=16 took 23 live
    # only because 2 of its blocks were cached; uncached it is 25.
    sim = sim_of([req("a", 0.0, p, n)], slots=1)
    r = sim.requests["a"]
    assert sim.round == r.rounds_run == r.true_rounds == tiny_live_rounds(p, n, B) == rounds
    plan = block_plan(p, n, B)
    assert r.denoise_rounds == rounds - plan.prompt_blocks
    assert r.finish_s == pytest.approx(0.030 * rounds)


def test_threshold_zero_runs_take_two_rounds_per_block():
    # §3.1, threshold 0: every block unmasks at once: (floor(P/B)) + 2 x blocks
    for p, n, rounds in [(1, 32, 18), (1, 8, 6), (10, 16, 12), (81, 8, 26)]:
        assert sim_of([req("a", 0.0, p, n)], slots=1, rounds=Confidence(1.0)).round == rounds


@pytest.mark.parametrize("model", [TinyLive(), Confidence(0.0), Confidence(0.4), Confidence(1.0),
                                   Table([1, 2, 3, 4], B), Table([0, 0, 1], B)])
def test_block_trajectories_stay_within_the_bounds(model):
    rng = request_rng(0, "x")
    for k in (1, 2, 3, 4) * 20:
        t = model.trajectory(k, rng)
        assert t[0] == k and t[-1] == 0 and list(t) == sorted(t, reverse=True)
        assert 2 <= len(t) <= k + 1 and all(a > b for a, b in zip(t, t[1:]))
    assert Confidence(0.0).trajectory(4, rng) == TinyLive().trajectory(4, rng) == (4, 3, 2, 1, 0)


# ---------------------------------------------------------------- (ii) stock vs mixed, §3.2

THREE = [req("long", 0.0, 41, 32), req("mid", 0.05, 8, 12), req("short", 0.10, 3, 4)]


@pytest.mark.parametrize("policy", [None, FcfsPolicy()], ids=["builtin", "fcfs"])
def test_stock_twin_reproduces_the_prefill_first_finish_rounds(policy):
    sim = sim_of(THREE, slots=4, policy=policy)
    assert finish_rounds(sim) == {"short": 17, "mid": 25, "long": 54}
    # notes: "1,1,2,2, then 1 x 6 (long prefill alone), then 3 x 7, 2 x 8, 1 x 29"
    assert runs(sim.round_sizes) == [(1, 2), (2, 2), (1, 6), (3, 7), (2, 8), (1, 29)]


def test_mixed_rounds_at_the_same_capacity_reproduce_the_probe():
    sim = sim_of(THREE, slots=4, policy=DwisePolicy(slots=4, round_blocks=4))
    assert finish_rounds(sim) == {"short": 10, "mid": 19, "long": 54}
    assert runs(sim.round_sizes) == [(1, 2), (2, 1), (3, 7), (2, 9), (1, 35)]  # notes: 1,1,2,3x7,2x9,1x35


def test_default_stock_slot_is_strictly_one_at_a_time():
    sim = sim_of(THREE, slots=1)
    assert sim.round == 78 and set(sim.round_sizes) == {1}  # notes: "1 x 78", short waits for long
    assert finish_rounds(sim) == {"long": 54, "mid": 71, "short": 78}


# ---------------------------------------------------------------- (iii) DWISE order

FOUR = [req("long", 0.0, 41, 32), req("long2", 0.05, 25, 24), req("mid", 0.10, 8, 12), req("short", 0.15, 3, 4)]


@pytest.mark.parametrize("online", [True, False])
def test_dwise_walk_reproduces_the_probes_srpt_finish_rounds(online):
    # NOTE: the probe's walk had no aging: DWISE's aging (default 8 rounds) is switched off here
    sim = sim_of(FOUR, slots=4, round_blocks=2,
                 policy=DwisePolicy(slots=4, round_blocks=2, max_wait_rounds=10**6, online=online))
    assert finish_rounds(sim) == {"short": 11, "mid": 20, "long2": 49, "long": 71}  # §3.4, the walk


def test_fewer_rounds_finish_first_when_rounds_hold_fewer_blocks_than_slots():
    outs = [24, 4, 16, 8, 12]  # one-token prompts: 0 prompt blocks, known max_new_tokens
    reqs = [req(f"r{n}", 0.0, 1, n) for n in outs]
    for policy in (DwisePolicy(slots=8, round_blocks=2, online=False), OracleDwise(8, 2, 64)):
        sim = sim_of(reqs, slots=8, round_blocks=2, policy=policy)
        by_finish = sorted(sim.requests.values(), key=lambda r: r.finish_round or 0)
        assert [r.output_tokens for r in by_finish] == sorted(outs)
        assert max(sim.round_sizes) == 2


# ---------------------------------------------------------------- (iv) aging


def test_aging_bounds_how_long_an_admitted_request_is_passed_over():
    slots, blocks, wait = 4, 2, 8
    # a long request, then a stream of shorts that out-rank it (prior 10^4 rounds, not learned)
    stream = [req(f"s{i:03d}", 0.01 + 0.1 * i, 3, 4) for i in range(150)]
    policy = DwisePolicy(slots=slots, round_blocks=blocks, max_wait_rounds=wait, prior_rounds=1e4, online=False)
    sim = sim_of([req("long", 0.0, 8, 16), *stream], slots=slots, round_blocks=blocks, policy=policy)
    long = sim.requests["long"]
    assert long.longest_pass_admitted > 0  # it was passed over ...
    assert long.longest_pass_admitted <= wait + math.ceil(slots / blocks)  # ... but never for longer
    # 22 rounds, one every ~wait + 1 rounds of 60 ms: done while the stream still runs
    assert long.finish_s is not None and long.finish_s < stream[-1].arrival_s


def test_without_aging_the_long_request_starves_under_the_same_stream():
    stream = [req(f"s{i:03d}", 0.01 + 0.1 * i, 3, 4) for i in range(150)]
    policy = DwisePolicy(slots=4, round_blocks=2, max_wait_rounds=10**6, prior_rounds=1e4, online=False)
    sim = sim_of([req("long", 0.0, 8, 16), *stream], slots=4, round_blocks=2, policy=policy)
    long = sim.requests["long"]
    assert long.finish_s > stream[-1].arrival_s and long.longest_pass_admitted > 100


# ---------------------------------------------------------------- (v) oracle <= DWISE < stock


def _mixed_workload(n: int = 120, seed: int = 3) -> list:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1.05, n))  # ~0.9 of 4 blocks x 30 ms per round
    prompts = rng.integers(1, 60, n)
    outs = np.where(rng.random(n) < 0.3, rng.integers(40, 120, n), rng.integers(1, 16, n))
    return [req(f"q{i:03d}", float(a), int(p), int(o)) for i, (a, p, o) in enumerate(zip(t, prompts, outs))]


def test_oracle_beats_dwise_beats_stock_at_equal_round_capacity():
    work = _mixed_workload()
    mean = {}
    for name, slots, policy in [("stock", 4, None), ("dwise", 8, DwisePolicy(slots=8, round_blocks=4)),
                                ("oracle", 8, OracleDwise(8, 4, 64))]:
        sim = sim_of(work, slots=slots, round_blocks=4, policy=policy)
        mean[name] = summarize(records_of(sim), Slo(1.0, 1.0))["e2e_s"]["mean"]
    assert mean["oracle"] <= mean["dwise"] < mean["stock"], mean


def test_truth_is_paired_across_policies_and_seeded():
    work = _mixed_workload(40)
    a = sim_of(work, slots=4, rounds=Confidence(0.5))
    b = sim_of(work, slots=8, round_blocks=4, rounds=Confidence(0.5), policy=DwisePolicy(slots=8, round_blocks=4))
    c = sim_of(work, slots=4, rounds=Confidence(0.5), seed=1)
    truth = {r: x.trajectories for r, x in a.requests.items()}
    assert truth == {r: x.trajectories for r, x in b.requests.items()}
    assert truth != {r: x.trajectories for r, x in c.requests.items()}


# ---------------------------------------------------------------- invariants and cost


def test_invariant_check_catches_a_lost_block():
    sim = sim_of(THREE, slots=4)
    sim.requests["mid"].rounds_run -= 1
    with pytest.raises(SimulationError, match="invariant"):
        sim.check()


def test_an_autoregressive_policy_is_refused_by_the_simulator():
    with pytest.raises(SimulationError, match="diffusion"):
        DllmSimulator(trace_of(THREE), DllmParams(B, 4, 4, TinyLive(), NOTES_COST), ShortestPrefillPolicy())


def test_roofline_round_cost_is_nearly_flat_up_to_its_capacity():
    accel = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(AcceleratorConfig),
                                                OmegaConf.load(CONF_DIR / "accelerator" / "h100.yaml")))
    model = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ModelProfileConfig),
                                                OmegaConf.load(CONF_DIR / "model_profile" / "llama-3.1-8b.yaml")))
    cost = RooflineRoundCost(CostModel(accel, model), B)
    one, many = cost.round_time([512]), cost.round_time([512] * 32)
    assert many < 1.1 * one and 0.005 < one < 0.02


# ---------------------------------------------------------------- (vi) the bench CLI


def _resolve(*overrides: str):
    return resolve_bench(compose_bench(list(overrides)))


def test_dllm_mode_from_the_cli_and_its_refusals():
    s = _resolve("sim.dllm.enabled=true", "+policy=dwise", "sim.dllm.rounds_per_block=confidence",
                 "sim.dllm.confidence=0.3", "sim.dllm.block_size=8")
    assert s.sim.dllm.enabled and s.sim.dllm.block_size == 8
    with pytest.raises(ConfigError, match=r"diffusion LM's block rounds.*sim\.dllm\.enabled=true"):
        _resolve("+policy=dwise")
    with pytest.raises(ConfigError, match=r"autoregressive model's prefill queue.*\+policy=dwise"):
        _resolve("sim.dllm.enabled=true", "+policy=lpm")
    with pytest.raises(ConfigError, match="not simulated"):
        _resolve("sim.dllm.enabled=true", "+cache=lru")
    with pytest.raises(ConfigError, match="needs \\+policy=dwise"):
        _resolve("sim.dllm.enabled=true", "sim.dllm.oracle=true")
    with pytest.raises(ConfigError, match="rounds_table"):
        _resolve("sim.dllm.enabled=true", "sim.dllm.rounds_per_block=table", "sim.dllm.rounds_table=[1,1,1,1,1]")
    _resolve("sim.dllm.enabled=true", "+policy=fcfs")  # SGLang's stock dLLM order: accepted


@needs_data(default_data_root() / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv")
def test_a_bench_run_in_dllm_mode_replays_the_stock_twin():
    s = _resolve("sim.dllm.enabled=true", "sim.max_running_requests=4", "trace=azure_conversation",
                 "trace.window_end_s=20", "trace.time_scale=10", "live.input_scale=0.0625",
                 "live.output_scale=0.125", "output.progress=false")
    result = run_bench(s)
    meta = result["meta"]["dllm"]
    assert meta["order"] == "sglang" and meta["slots"] == meta["round_blocks"] == 4
    assert result["summary"]["finished"] == result["summary"]["requests"] > 0
