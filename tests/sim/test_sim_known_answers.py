"""Hand-built traces whose timings follow by hand from SGLang's loop.

Cost model (``LinearCost``): a prefill iteration takes 10 ms + 1 ms per new
token, a decode step 20 ms. A prefill batch's requests get a token at its end;
prefill runs before decode whenever a prefill batch forms.
"""

from __future__ import annotations

import pytest

from bench.metrics import Slo, summarize
from bench.sim import records_of
from bench.sim.request import Phase
from policies.admission import AdmissionNeeds
from policies.admission.max_queue import MaxQueuePolicy
from policies.scheduling.fcfs import FcfsPolicy
from tests.sim.helpers import req, simulate, trace_of

THREE = [req("a", 0.0, 100, 3), req("b", 0.0, 200, 2), req("c", 0.5, 50, 1)]


def times(sim):
    return {rid: (round(r.first_token_s, 9), round(r.finish_s, 9)) for rid, r in sim.requests.items()}


@pytest.mark.parametrize("order", [None, FcfsPolicy()], ids=["builtin", "fcfs"])
def test_one_batch_then_decode(order):
    # t=0: a+b prefill together (300 tokens): 0.31. Decode 0.33 (b has 2: done),
    # 0.35 (a has 3: done). c arrives at 0.5 to an idle server: 0.5 + 0.06.
    sim = simulate(trace_of(THREE), order=order)
    assert times(sim) == {"a": (0.31, 0.35), "b": (0.31, 0.33), "c": (0.56, 0.56)}
    assert list(sim.running.step_end_times) == pytest.approx([0.33, 0.35])


def test_prefill_token_budget_splits_the_batch():
    # max_prefill_tokens=150, no chunking: a (100) fits; b (200 >= 50 left) waits.
    # a: 0.11; b prefills next, before any decode: 0.11 + 0.21 = 0.32; then decode
    # 0.34 (a 2 tokens, b 2: done) and 0.36 (a 3: done).
    sim = simulate(trace_of(THREE), max_prefill_tokens=150)
    assert times(sim) == {"a": (0.11, 0.36), "b": (0.32, 0.34), "c": (0.56, 0.56)}


def test_chunked_prefill():
    # chunk 128: pass 1 = a (100) + 28 tokens of b: 0.138 (a's first token).
    # pass 2 = 128 more of b: 0.276; pass 3 = b's last 44: 0.33 (b's first token).
    # Decode runs only then: 0.35 (a 2, b 2: done), 0.37 (a 3: done).
    sim = simulate(trace_of(THREE), chunked_prefill_size=128)
    assert times(sim) == {"a": (0.138, 0.37), "b": (0.33, 0.35), "c": (0.56, 0.56)}
    assert sim.requests["b"].prefill_tokens == 200


def test_prefix_cache_hits_and_the_last_token_is_always_computed():
    # 16-token blocks. a: blocks 1,2,3 (48 tokens) -> 0.058, decode 0.078.
    # b shares blocks 1,2: 32 cached, 16 computed: 1.0 + 0.026.
    # c repeats a's prompt: all cached, but SGLang recomputes the last token: 2.0 + 0.011.
    trace = trace_of([req("a", 0.0, 48, 2, [1, 2, 3]), req("b", 1.0, 48, 1, [1, 2, 4]),
                      req("c", 2.0, 48, 1, [1, 2, 3])], block_size=16)
    sim = simulate(trace)
    assert times(sim) == {"a": (0.058, 0.078), "b": (1.026, 1.026), "c": (2.011, 2.011)}
    assert [sim.requests[r].cached_first for r in "abc"] == [0, 32, 47]
    summary = summarize(records_of(sim), Slo(1.0, 1.0))
    assert summary["prefix_hit_rate"] == pytest.approx((32 + 47) / 144)


def test_same_prefix_in_one_batch_is_computed_twice():
    # Both arrive together: matched before either is cached, so neither hits.
    trace = trace_of([req("a", 0.0, 48, 1, [1, 2, 3]), req("b", 0.0, 48, 1, [1, 2, 4])], block_size=16)
    sim = simulate(trace)
    assert [sim.requests[r].cached_first for r in "ab"] == [0, 0]
    assert times(sim) == {"a": (0.106, 0.106), "b": (0.106, 0.106)}
    assert sim.cache.tree_tokens == 64  # blocks 1, 2, 3, 4 once each


def test_closed_loop_turn_waits_for_its_predecessor():
    # b is sent 0.5 s after a finished (0.13): 0.63 + 0.06 (50 tokens).
    trace = trace_of([req("a", 0.0, 100, 2, session_id="s"),
                      req("b", 99.0, 50, 1, session_id="s", after="a", delay_s=0.5)])
    sim = simulate(trace)
    assert times(sim) == {"a": (0.11, 0.13), "b": (0.69, 0.69)}
    assert sim.requests["b"].arrival_s == pytest.approx(0.63)


def test_admission_rejects_past_the_queue_bound():
    # max_waiting=1: a is admitted into an empty queue, b and c find one waiting.
    sim = simulate(trace_of(THREE[:2] + [req("d", 0.0, 10, 1)]), admission=MaxQueuePolicy(max_waiting=1))
    assert {rid: r.phase for rid, r in sim.requests.items()} == {
        "a": Phase.FINISHED, "b": Phase.REJECTED, "d": Phase.REJECTED}
    assert "queue full" in sim.requests["b"].reject_reason


def test_request_slots_limit_the_batch():
    # One request slot: b waits for a to finish (0.35 at 3 tokens) before prefilling.
    sim = simulate(trace_of(THREE[:2]), max_running_requests=1)
    assert times(sim)["a"] == (0.11, 0.15)
    assert times(sim)["b"] == (0.15 + 0.21, 0.15 + 0.21 + 0.02)


def test_prompt_that_can_never_fit_is_aborted():
    sim = simulate(trace_of([req("big", 0.0, 500, 4), req("ok", 0.0, 50, 1)]), capacity=300)
    assert sim.requests["big"].phase is Phase.ABORTED
    assert sim.requests["ok"].phase is Phase.FINISHED


def test_output_is_clipped_to_what_the_pool_can_hold():
    # SGLang's init_req_max_new_tokens: at most capacity - input - page - 1 (we keep
    # one more token of headroom).
    sim = simulate(trace_of([req("a", 0.0, 50, 100)]), capacity=80)
    assert sim.requests["a"].num_output == 80 - 50 - 3


class DeferWhileBusy:
    """Test admission policy: defer while anything else waits or runs."""

    needs = AdmissionNeeds()

    def __init__(self) -> None:
        self.seen: list[tuple[str, int, int, int]] = []

    def decide(self, view):
        from policies.admission import ADMIT, AdmissionAction, AdmissionDecision

        self.seen.append((view.request.rid, view.num_waiting, view.num_deferred, view.num_running))
        if view.num_waiting + view.num_running:
            return AdmissionDecision(AdmissionAction.DEFER)
        return ADMIT


def test_deferred_requests_wait_until_admitted():
    # a is admitted; b is deferred while a waits and runs (a: 0.11, 0.13, 0.15).
    # When a is gone, the next pass admits b: 0.15 + 0.21, then one decode step.
    gate = DeferWhileBusy()
    sim = simulate(trace_of(THREE[:2]), admission=gate)
    assert times(sim) == {"a": (0.11, 0.15), "b": (0.36, 0.38)}
    assert gate.seen[:2] == [("a", 0, 0, 0), ("b", 1, 0, 0)]  # on arrival: b sees a waiting
    assert ("b", 0, 0, 1) in gate.seen  # revisited while a ran
    assert gate.seen[-1] == ("b", 0, 0, 0)


class DeferAlways:
    needs = AdmissionNeeds()

    def decide(self, view):
        from policies.admission import AdmissionAction, AdmissionDecision

        return AdmissionDecision(AdmissionAction.DEFER)


def test_requests_deferred_forever_end_unserved():
    sim = simulate(trace_of([req("a", 0.0, 10, 1), req("b", 1.0, 10, 1)]), admission=DeferAlways(),
                   drain_timeout_s=2.0, idle_poll_s=0.5)
    assert {r.phase for r in sim.requests.values()} == {Phase.UNSERVED}
    assert sim.now == pytest.approx(3.5)  # polled every 0.5 s until 2 s past the last arrival
