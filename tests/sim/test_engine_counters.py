"""SGLang's step counters (``bench.counters``), live and rebuilt from a simulation."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bench.config import compose_bench, resolve_bench
from bench.counters import EngineCounters
from bench.sim import CostModel, build_simulator
from bench.sim.overlap import IterationLog
from tests.sim.helpers import LinearCost, req, settings, trace_of


def loads_of(batches: list[int], steps_us: list[float], busy_us: int = 0, tokens: int = 0) -> list[dict]:
    """A ``/v1/loads`` answer's ``loads`` with SGLang's moment sums of these steps."""
    b, t = np.array(batches, float), np.array(steps_us, float)
    return [{"total_prefill_busy_us": busy_us, "total_prefill_uncached_tokens": tokens,
             "decode_moments": [len(b), b.sum(), t.sum(), (b * b).sum(), (b * t).sum(), b.sum()]}]


def test_the_decode_line_is_the_least_squares_fit_of_step_time_on_batch():
    rng = np.random.default_rng(0)
    batches = rng.integers(1, 20, 200).tolist()
    steps = [70_000 + 9_000 * b + rng.normal(0, 5_000) for b in batches]
    c = EngineCounters.from_loads(loads_of(batches, steps, busy_us=3_000_000, tokens=512))
    slope, intercept = np.polyfit(batches, np.array(steps) / 1e6, 1)
    line = c.decode_line()
    assert line["slope_s"] == pytest.approx(slope) and line["intercept_s"] == pytest.approx(intercept)
    assert line["mean_batch"] == pytest.approx(np.mean(batches))
    assert c.prefill_busy_s == 3.0 and c.prefill_tokens == 512


def test_counters_over_a_replay_are_after_minus_before():
    before = EngineCounters.from_loads(loads_of([1, 2], [80_000, 90_000], busy_us=1_000_000, tokens=10))
    after = EngineCounters.from_loads(loads_of([1, 2, 4, 8], [80_000, 90_000, 110_000, 150_000],
                                               busy_us=4_000_000, tokens=70))
    diff = after.minus(before)
    assert diff.decode_steps == 2 and diff.prefill_busy_s == 3.0 and diff.prefill_tokens == 60
    assert diff.decode_line()["slope_s"] == pytest.approx(0.01)  # (0.150 - 0.110) / (8 - 4)


def test_one_batch_size_has_no_slope():
    line = EngineCounters.from_loads(loads_of([4, 4, 4], [1, 2, 3])).decode_line()
    assert np.isnan(line["slope_s"]) and line["mean_batch"] == 4


def test_the_simulation_counts_as_sglang_does():
    # a: prefill [0, 0.02), decode steps [0.02, 0.04) and [0.04, 0.06); b arrives at 1.0:
    # prefill [1.0, 1.02), one decode step [1.02, 1.04).
    log = IterationLog(LinearCost(overhead=0.01, per_token=0.001, decode_step=0.02))
    sim = build_simulator(trace_of([req("a", 0.0, 10, 3), req("b", 1.0, 10, 2)]), log, settings())
    log.clock = lambda: sim.now
    sim.run()
    c = log.engine_counters()
    # NOTE: a prefill is busy until its result is processed, after the next iteration
    # ran back to back: 0 -> 0.04 and 1.0 -> 1.04.
    assert c.prefill_busy_s == pytest.approx(0.08) and c.prefill_tokens == 20
    # one decode launch follows a decode launch at once: 0.04 - 0.02, batch 1;
    # the step after b's prefill follows a prefill, not a decode step
    assert c.decode_steps == 1 and c.decode_time_s == pytest.approx(0.02) and c.decode_batch_sum == 1


def test_the_loaded_decode_term_adds_per_request_decode_time_only():
    s = resolve_bench(compose_bench(["accelerator=cpu", "model_profile=smollm2-135m"]))
    base = CostModel(replace(s.accelerator, decode_request_overhead_s=0.0), s.model_profile)
    more = CostModel(replace(s.accelerator, decode_request_overhead_s=0.003), s.model_profile)
    assert more.decode_time(8, 800) - base.decode_time(8, 800) == pytest.approx(0.024)
    assert more.prefill_time([(256, 0), (64, 32)]) == base.prefill_time([(256, 0), (64, 32)])
