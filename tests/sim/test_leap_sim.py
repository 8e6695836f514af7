"""LEAP in the simulator: the simulated length signal and LEAP learning from it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.sim import records_of
from bench.sim.signal import LengthSignal
from policies.scheduling.fcfs import FcfsPolicy
from policies.scheduling.leap import LeapPolicy
from policies.scheduling.shortest_output import ShortestOutputPolicy
from tests.sim.helpers import req, simulate, trace_of


def test_signal_is_per_request_and_seeded():
    s = LengthSignal(log_std=0.5, seed=3)
    assert s.features("a", 100) == s.features("a", 100) != s.features("b", 100)
    assert LengthSignal(0.0).features("a", 100) == (math.log1p(100),)
    zs = np.array([LengthSignal(1.0, 0.2).features(f"r{i}", 10)[0] - math.log1p(10) for i in range(4000)])
    assert zs.mean() == pytest.approx(0.2, abs=0.05) and zs.std() == pytest.approx(1.0, abs=0.05)
    with pytest.raises(ValueError, match="length_signal_log_std"):
        LengthSignal(-1.0)


def _trace():
    # one request slot; 120 requests with lengths spread over 2..512 arrive in bursts of 30
    rng = np.random.default_rng(0)
    outs = np.exp(rng.uniform(math.log(2), math.log(512), 120)).astype(int)
    return trace_of([req(f"r{i}", 10.0 * (i // 30), 50, int(o)) for i, o in enumerate(outs)])


def _mean_per_token(sim) -> float:
    return float(np.mean([(r.finish_s - r.arrival_s) / r.output_tokens for r in records_of(sim)]))


def test_leap_learns_the_signal_online_and_beats_fcfs():
    trace = _trace()
    kw = dict(max_running_requests=1)
    fcfs = _mean_per_token(simulate(trace, order=FcfsPolicy(), **kw))
    oracle = _mean_per_token(simulate(trace, order=ShortestOutputPolicy(), **kw))
    leap_policy = LeapPolicy(feature_dim=1)
    leap = _mean_per_token(simulate(trace, order=leap_policy, length_signal=LengthSignal(0.3), **kw))
    assert leap_policy.predictor.n == 120  # every finished request taught the head
    assert oracle < leap < 0.7 * fcfs
    # without features LEAP can only use its prior: arrival order
    blind = _mean_per_token(simulate(trace, order=LeapPolicy(feature_dim=1), **kw))
    assert blind == pytest.approx(fcfs)
