"""The CPU extensions of the cost model, their fit, and client-visible simulated times."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bench.config import compose_bench, resolve_bench
from bench.live.fit import ADDITIVE, ROOFLINE, Point, fit, fit_additive, predict
from bench.sim import CostModel, build_simulator, records_of
from bench.sim.overlap import IterationLog, client_visible
from tests.sim.helpers import LinearCost, req, settings, trace_of


@pytest.fixture(scope="module")
def cpu():
    """The CPU profile with its fitted CPU extensions switched off: the plain roofline
    (conf/accelerator/cpu.yaml ships the additive form the calibration chose)."""
    s = resolve_bench(compose_bench(["accelerator=cpu", "model_profile=smollm2-135m"]))
    roofline = replace(s.accelerator, overlap_compute_memory=True, request_overhead_s=0.0,
                       gemm_min_tokens=0, gemm_overhead_s=0.0, kv_bandwidth_efficiency=None,
                       decode_request_overhead_s=0.0)
    return roofline, s.model_profile


def test_defaults_keep_the_roofline_exactly(cpu):
    accel, model = cpu
    c = CostModel(accel, model)
    weights = c.weight_bytes
    for batch, ctx in ((1, 10), (64, 50_000)):
        flops = 2 * (c.shape.linear_params + c.shape.head_params) * batch + 4 * c.shape.attn_width * ctx
        nbytes = weights + (ctx + batch) * c.kv_bytes_per_token
        assert c.decode_time(batch, ctx) == accel.iteration_overhead_s + max(
            flops / c.decode_flops_per_s, nbytes / c.bytes_per_s)


def test_additive_form_by_hand(cpu):
    accel, model = cpu
    ext = replace(accel, overlap_compute_memory=False, kv_bandwidth_efficiency=0.05,
                  request_overhead_s=0.002, gemm_min_tokens=4, gemm_overhead_s=0.03)
    c, base = CostModel(ext, model), CostModel(accel, model)
    kv_bw = accel.memory_bandwidth_gbs * 1e9 * 0.05
    for batch, ctx in ((3, 300), (4, 400)):
        flops = 2 * (c.shape.linear_params + c.shape.head_params) * batch + 4 * c.shape.attn_width * ctx
        expected = (accel.iteration_overhead_s + batch * 0.002 + (0.03 if batch >= 4 else 0.0)
                    + flops / c.decode_flops_per_s + c.weight_bytes / c.bytes_per_s
                    + (ctx + batch) * c.kv_bytes_per_token / kv_bw)
        assert c.decode_time(batch, ctx) == pytest.approx(expected, rel=1e-12)
    # the packing step is by new tokens: a 4-token prefill pays it, 3 tokens do not
    jump = c.prefill_time([(4, 0)]) - c.prefill_time([(3, 0)])
    assert jump > 0.03 and base.prefill_time([(4, 0)]) - base.prefill_time([(3, 0)]) < 0.01


def synthetic(accel, model) -> list[Point]:
    pts = [Point("prefill", 1, n, 0.0) for n in (1, 2, 3, 4, 6, 8, 16, 64, 256, 1024)]
    pts += [Point("prefill", k, n, 0.0) for k, n in ((2, 64), (4, 64), (8, 32))]
    pts += [Point("decode", b, c, 0.0) for b in (1, 2, 3, 4, 8, 16, 32) for c in (20, 500, 2000)]
    times = predict(pts, accel, model)
    return [replace(p, measured_s=float(t)) for p, t in zip(pts, times)]


def test_the_fit_recovers_known_constants(cpu):
    accel, model = cpu
    truth = replace(accel, overlap_compute_memory=False, prefill_mfu=0.8, decode_mfu=0.6,
                    kv_bandwidth_efficiency=0.12, iteration_overhead_s=0.02, request_overhead_s=0.003,
                    gemm_min_tokens=4, gemm_overhead_s=0.035)
    fitted = fit_additive(synthetic(truth, model), accel, model)
    assert fitted.max_abs_error < 1e-6
    for key, value in fitted.params().items():
        assert value == pytest.approx(getattr(truth, key), rel=1e-4), key
    # the roofline cannot follow an additive, stepped machine
    assert fit(synthetic(truth, model), accel, model, ROOFLINE).max_abs_error > 0.1


def test_the_roofline_fit_recovers_a_roofline_machine(cpu):
    accel, model = cpu
    truth = replace(accel, prefill_mfu=0.7, decode_mfu=0.4, bandwidth_efficiency=0.6,
                    iteration_overhead_s=0.01)
    fitted = fit(synthetic(truth, model), accel, model, ROOFLINE)
    assert fitted.max_abs_error < 1e-4
    assert fitted.accelerator.bandwidth_efficiency == pytest.approx(0.6, rel=1e-3)
    assert ADDITIVE.without("request_overhead_s").free == tuple(
        k for k in ADDITIVE.free if k != "request_overhead_s")


def simulate_logged(trace):
    log = IterationLog(LinearCost(overhead=0.01, per_token=0.001, decode_step=0.02))
    sim = build_simulator(trace, log, settings())
    log.clock = lambda: sim.now
    sim.run()
    return records_of(sim), log


def test_tokens_are_seen_when_the_next_back_to_back_iteration_ends():
    # a: prefill [0, 0.02), decode steps end 0.04, 0.06 (its last token); b arrives later, alone
    records, log = simulate_logged(trace_of([req("a", 0.0, 10, 3), req("b", 1.0, 10, 2)]))
    assert list(log.starts) == pytest.approx([0.0, 0.02, 0.04, 1.0, 1.02])
    seen = {r.rid: r for r in client_visible(records, log)}
    raw = {r.rid: r for r in records}
    assert raw["a"].first_token_s == pytest.approx(0.02) and seen["a"].first_token_s == pytest.approx(0.04)
    assert list(seen["a"].token_times) == pytest.approx([0.04, 0.06, 0.06])  # last: nothing follows
    assert seen["a"].finish_s == pytest.approx(0.06)
    assert seen["b"].first_token_s == pytest.approx(1.04) and seen["b"].finish_s == pytest.approx(1.04)
    assert seen["b"].arrival_s == raw["b"].arrival_s


def test_a_token_before_an_idle_gap_is_seen_at_once():
    records, log = simulate_logged(trace_of([req("a", 0.0, 10, 1), req("b", 0.5, 10, 1)]))
    seen = client_visible(records, log)
    assert [r.first_token_s for r in seen] == [r.first_token_s for r in records]
    ends, visible = log.visible_ends()
    assert np.array_equal(ends, visible)


def test_unfinished_requests_keep_their_times():
    records, log = simulate_logged(trace_of([req("a", 0.0, 10, 2)]))
    gone = replace(records[0], status="aborted", first_token_s=None, token_times=None)
    assert client_visible([gone], log) == [gone]
