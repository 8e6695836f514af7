"""The roofline cost model against hand arithmetic, and the metric definitions."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import yaml

from bench.config import compose_bench, resolve_bench
from bench.live.server import REPO
from bench.metrics import RequestRecord, Slo, summarize, windows
from bench.sim import CostModel, SimSettings


def cost_for(*overrides: str) -> CostModel:
    s = resolve_bench(compose_bench(list(overrides)))
    return CostModel(s.accelerator, s.model_profile)


def test_llama_8b_on_h100_by_hand():
    c = cost_for("accelerator=h100", "model_profile=llama-3.1-8b")
    # per layer: q,k,v,o = 4096*(4096 + 2*1024) + 4096*4096; MLP = 3*4096*14336
    assert c.shape.linear_params == 32 * (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336)
    assert c.shape.total_params == pytest.approx(8.03e9, rel=1e-3)
    assert c.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2
    # (79.6 GiB * 0.84 - 2 bytes * 8.03e9 params) / 128 KiB per token
    assert c.kv_capacity_tokens() == 425_221
    # decode, batch 1: memory bound, weights (linear + LM head) at 0.8 * 3.35 TB/s, + 3 ms
    weights = (c.shape.linear_params + 128256 * 4096) * 2
    assert c.decode_time(1, 0) == pytest.approx(0.003 + (weights + 131072) / 2.68e12)
    # prefill 1000 tokens: compute bound at 0.5 * 989.4 TFLOP/s, causal attention included
    flops = 2 * c.shape.linear_params * 1000 + 2 * 128256 * 4096 + 4 * 32 * 4096 * (1000 * 1001 / 2)
    assert c.prefill_time([(1000, 0)]) == pytest.approx(0.003 + flops / 494.7e12)


def test_attention_over_cached_context_costs_prefill_time():
    c = cost_for()
    assert c.prefill_time([(1000, 50_000)]) > 1.5 * c.prefill_time([(1000, 0)])
    assert c.decode_time(64, 64 * 20_000) > 2 * c.decode_time(64, 64 * 100)


def test_every_accelerator_and_model_profile_builds():
    from compose.config import group_options

    for accel in group_options("accelerator"):
        for model in group_options("model_profile"):
            s = resolve_bench(compose_bench([f"accelerator={accel}", f"model_profile={model}"]))
            c = CostModel(s.accelerator, s.model_profile)
            if accel == "cpu" and model != "smollm2-135m":
                continue  # a 8B+ model does not fit the CPU server's pool
            settings = SimSettings.resolve(s.sim, s.accelerator, s.model_profile, c)
            assert settings.capacity > 10_000 and c.decode_time(1, 100) > 0


def test_a_wrong_parameter_count_is_caught():
    with pytest.raises(ValueError, match="published num_params"):
        cost_for("model_profile.num_params=1e9")


def test_cpu_profile_reproduces_the_cpu_server_measurements():
    """Anchors measured on the CPU server by bench/scripts/calibrate_cpu.py (documented
    in conf/accelerator/cpu.yaml): batch-1 decode ~55 ms/step (~18 tok/s), a
    256-token prefill ~0.39 s, a 2048-token prefill ~3.7 s."""
    c = cost_for("accelerator=cpu", "model_profile=smollm2-135m")
    assert 15.5 <= 1 / c.decode_time(1, 40) <= 20.5
    assert 0.33 <= c.prefill_time([(256, 0)]) <= 0.45
    assert 3.1 <= c.prefill_time([(2048, 0)]) <= 4.3


def test_cpu_profile_serves_as_the_cpu_server_is_configured():
    """The simulated CPU server has the live one's pool, slots and overlap setting
    (conf/config.yaml ``server.cpu_sglang``): a default changed there must be
    changed in conf/accelerator/cpu.yaml (and the profile refitted) too."""
    cpu = yaml.safe_load((REPO / "conf" / "config.yaml").read_text())["server"]["cpu_sglang"]
    s = resolve_bench(compose_bench(["accelerator=cpu", "model_profile=smollm2-135m"]))
    a = s.accelerator
    assert a.max_total_tokens == cpu["max_total_tokens"]
    assert a.max_running_requests == cpu["max_running_requests"]
    assert a.overlap_schedule is not cpu["disable_overlap_schedule"]
    c = CostModel(a, s.model_profile)
    slots = SimSettings.resolve(s.sim, a, s.model_profile, c).max_running_requests
    assert slots == cpu["max_running_requests"]
    # NOTE: the user's sim.max_running_requests wins, as sglang.max_running_requests does live
    s2 = resolve_bench(compose_bench(["accelerator=cpu", "model_profile=smollm2-135m",
                                      "sim.max_running_requests=32"]))
    assert SimSettings.resolve(s2.sim, s2.accelerator, s2.model_profile, c).max_running_requests == 32


def test_a_server_without_the_overlap_scheduler_by_default_is_not_charged_for_it():
    from bench.sim.overlap import overlap_charged

    cpu = resolve_bench(compose_bench(["accelerator=cpu", "model_profile=smollm2-135m"])).accelerator
    c = cost_for("accelerator=cpu", "model_profile=smollm2-135m")
    assert overlap_charged(c, cpu, []) == (c, False)  # no overlap loop: no token is delayed
    assert overlap_charged(c, cpu, ["+cache (gap)"]) == (c, False)
    # the same device with the overlap scheduler on by default: the loop delays tokens
    on = replace(cpu, overlap_schedule=True)
    assert overlap_charged(c, on, []) == (c, on.synchronous_forward)
    h100 = resolve_bench(compose_bench(["accelerator=h100"])).accelerator
    g = cost_for("accelerator=h100")
    charged, lag = overlap_charged(g, h100, ["+cache (gap)"])
    assert charged.decode_time(8, 8000) == pytest.approx(g.decode_time(8, 8000) * h100.no_overlap_slowdown)
    assert h100.no_overlap_slowdown > 1 and lag is False


# ---------------------------------------------------------------------- metrics
def records() -> list[RequestRecord]:
    return [
        RequestRecord("a", 0.0, "finished", 100, 5, cached_tokens=10, prefill_tokens=90,
                      first_token_s=1.0, finish_s=3.0, token_times=np.array([1, 1.5, 2, 2.5, 3.0])),
        RequestRecord("b", 1.0, "finished", 50, 1, cached_tokens=0, prefill_tokens=70,
                      first_token_s=1.2, finish_s=1.2, token_times=np.array([1.2]), retractions=1),
        RequestRecord("c", 2.5, "rejected", 30, 0, finish_s=2.5),
    ]


def test_summary_by_hand():
    s = summarize(records(), Slo(ttft_s=0.5, tpot_s=1.0))
    assert (s["requests"], s["finished"], s["rejected"]) == (3, 2, 1)
    assert s["ttft_s"]["mean"] == pytest.approx((1.0 + 0.2) / 2)
    assert s["tpot_s"]["p50"] == pytest.approx(0.5)  # b has one token: no TPOT
    assert s["itl_s"]["mean"] == pytest.approx(0.5)
    assert s["e2e_s"]["p99"] == pytest.approx(0.2 + 0.99 * (3.0 - 0.2))  # linear interpolation
    assert s["span_s"] == 3.0
    assert s["goodput_rps"] == pytest.approx(1 / 3.0)  # only b meets TTFT <= 0.5 s
    assert s["prefix_hit_rate"] == pytest.approx(10 / 150)  # c was never prefilled
    assert s["recomputed_tokens"] == 20  # b prefilled 70 of a 50-token prompt
    assert s["throughput_output_tps"] == pytest.approx(6 / 3.0)


def test_windows_group_by_arrival():
    rows = windows(records(), Slo(0.5, 1.0), window_s=2.0)
    assert [(w["start_s"], w["arrivals"], w["finished"]) for w in rows] == [(0.0, 2, 2), (2.0, 1, 0)]
    assert rows[0]["goodput_rps"] == pytest.approx(0.5)
