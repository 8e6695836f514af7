"""``sim.send_interval_s``: open-loop requests reach the server one after another
(``bench.sim.arrivals.paced``), so an idle server prefills a burst's first request alone."""

from __future__ import annotations

import pytest

from bench.config import compose_bench, resolve_bench
from bench.run import run_bench
from bench.sim.arrivals import paced
from bench.traces.paths import default_data_root
from compose.config import ConfigError
from tests.data import needs_data

from .helpers import req, simulate, trace_of


def burst():
    """Five requests sharing one timestamp, a closed-loop follower, one request later."""
    rs = [req(f"b{i}", 1.0, 400, 8) for i in range(5)]
    rs.append(req("f", 0.0, 40, 4, after="b0", delay_s=0.5))
    rs.append(req("late", 1.0005, 40, 4))
    return trace_of(rs)


def test_pacing_spaces_open_loop_requests_in_trace_order_and_leaves_followers():
    trace = burst()
    out = paced(trace, 0.0002)
    times = {r.rid: r.arrival_s for r in out.requests}
    assert [times[f"b{i}"] for i in range(5)] == pytest.approx([1.0, 1.0002, 1.0004, 1.0006, 1.0008])
    assert times["late"] == pytest.approx(1.001)  # behind the burst: order kept, never earlier than its own time
    follower = next(r for r in out.requests if r.rid == "f")
    assert (follower.arrival_s, follower.after, follower.delay_s) == (0.0, "b0", 0.5)
    assert [r.rid for r in out.roots()] == [r.rid for r in trace.roots()]
    assert paced(trace, 0.0) is trace and "5 moved" in out.notes[-1]


def test_an_idle_server_prefills_a_paced_bursts_first_request_alone():
    at_once = simulate(burst()).requests
    paced_run = simulate(paced(burst(), 0.0002)).requests
    # at once: one prefill pass takes the whole burst, so all five get their first token together
    assert len({at_once[f"b{i}"].first_token_s for i in range(5)}) == 1
    # paced: the first is prefilled alone (400 tokens), the other four in the next pass
    first, rest = paced_run["b0"].first_token_s, {paced_run[f"b{i}"].first_token_s for i in range(1, 5)}
    assert len(rest) == 1 and first < rest.pop()
    assert first - 1.0 == pytest.approx(0.01 + 0.001 * 400)


@needs_data(default_data_root() / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv")
def test_a_negative_interval_is_refused_naming_the_field():
    settings = resolve_bench(compose_bench(["trace=azure_conversation", "trace.window_start_s=1800",
                                            "trace.window_end_s=1805", "sim.send_interval_s=-1",
                                            "output.progress=false", "output.plots=false"]))
    with pytest.raises(ConfigError, match="sim.send_interval_s"):
        run_bench(settings)


def test_burst_gaps_are_taken_within_one_trace_time_in_send_order():
    from bench.scripts.send_spacing import burst_gaps, rounded_median

    times = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 2.0, "e": 3.0, "f": 3.0}
    sent = [("b", 10.0003), ("a", 10.0), ("c", 10.0007), ("d", 20.0), ("f", 30.5), ("e", 30.4996)]
    assert burst_gaps(times, sent) == pytest.approx([0.0003, 0.0004, 0.0004])  # d: a burst of one gives none
    assert rounded_median([0.000234, 0.0001, 0.0009]) == 0.0002

