"""The simulator's adapters binding: known answers by hand and invariants.

Cost model as in ``test_sim_known_answers`` (prefill 10 ms + 1 ms/token, decode
20 ms), plus ``load_s`` = 5 ms for each adapter loaded into a slot.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.sim import SimParts, build_simulator
from bench.sim.adapters import AdapterMix, AdapterSeam, AdapterSlotTable
from policies.adapters.scute import ScutePolicy
from tests.sim.helpers import LinearCost, req, trace_of
from tests.sim.helpers import settings as sim_settings


class Mix:
    """A fixed request -> adapter map standing in for ``AdapterMix``."""

    def __init__(self, by_rid: dict[str, str | None]) -> None:
        self.by_rid = by_rid

    def adapter_of(self, key: str) -> str | None:
        return self.by_rid[key]


def run(trace, by_rid, max_per_batch=2, order="lru", **kw):
    table = AdapterSlotTable(ScutePolicy(eviction=order), max_per_batch, load_s=0.005)
    sim = build_simulator(trace, LinearCost(), sim_settings(**kw), SimParts(seams=[AdapterSeam(table, Mix(by_rid))]))
    sim.run()
    return sim, table


def test_a_request_whose_adapter_does_not_fit_is_skipped_not_a_stop():
    # Two slots. a (x) and b (y) arrive together: x and y fill both slots, so
    # a prefills with b: loads 2 x 5 ms, then 10 + 200 ms: first tokens at 0.22.
    # c (x, arrives with them) joins the same pass; d (z) is skipped while x and
    # y run, and prefills once both are done (z evicts x, the least recent).
    trace = trace_of([req("a", 0.0, 100, 2), req("b", 0.0, 100, 2), req("d", 0.0, 10, 1),
                      req("c", 0.0, 10, 1)])
    sim, table = run(trace, {"a": "x", "b": "y", "c": "x", "d": "z"})
    first = {rid: round(r.first_token_s, 9) for rid, r in sim.requests.items()}
    assert first["a"] == first["b"] == first["c"] == pytest.approx(0.01 + 0.21 + 0.01)
    # decode step (a, b: 0.25), then d: load 5 ms + 10 + 10 ms
    assert first["d"] == pytest.approx(0.25 + 0.005 + 0.02)
    # y evicts the base model's slot (nothing else may go); z evicts x (x and y
    # were last used in the same batch: ties go by name, as SGLang marks them)
    assert table.loads == 3 and table.evictions == 2 and table.resident == {"y", "z"}


def test_lru_and_fifo_evict_different_adapters():
    # three slots, the base model's resident from the start: x loaded first, y
    # second, x used again; z needs a slot and adapters go before the base
    # model: lru evicts y (x was used last), fifo evicts x (loaded first).
    trace = trace_of([req("1", 0.0, 10, 1), req("2", 1.0, 10, 1), req("3", 2.0, 10, 1), req("4", 3.0, 10, 1)])
    by = {"1": "x", "2": "y", "3": "x", "4": "z"}
    assert run(trace, by, max_per_batch=3, order="lru")[1].resident == {None, "x", "z"}
    assert run(trace, by, max_per_batch=3, order="fifo")[1].resident == {None, "y", "z"}


def test_mix_is_stable_skewed_and_honours_the_base_share():
    mix = AdapterMix(count=4, zipf_s=1.2, base_share=0.25, seed=3)
    drawn = [mix.adapter_of(f"s{i}") for i in range(4000)]
    assert drawn == [AdapterMix(4, 1.2, 0.25, 3).adapter_of(f"s{i}") for i in range(4000)]
    counts = {a: drawn.count(a) for a in (None, "a0", "a1", "a2", "a3")}
    assert 0.22 < counts[None] / 4000 < 0.28
    assert counts["a0"] > counts["a1"] > counts["a2"] > counts["a3"] > 0


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 4), st.sampled_from(["lru", "fifo", "lfu"]))
def test_no_forward_batch_holds_more_adapters_than_slots(seed, slots, order):
    rng = random.Random(seed)
    reqs = [req(f"r{i}", rng.uniform(0, 2), rng.randint(5, 60), rng.randint(1, 6)) for i in range(30)]
    by = {r.rid: rng.choice([None, "a", "b", "c", "d", "e"]) for r in reqs}
    table = AdapterSlotTable(ScutePolicy(eviction=order), slots, load_s=0.001)
    seen: list[int] = []
    prepare = table.prepare

    def checked(adapters):
        adapters = list(adapters)
        seen.append(len(set(adapters)))
        return prepare(adapters)

    table.prepare = checked  # type: ignore[method-assign]
    sim = build_simulator(trace_of(reqs), LinearCost(), sim_settings(max_running_requests=8),
                          SimParts(seams=[AdapterSeam(table, Mix(by))]))
    sim.run()
    assert all(r.finish_s is not None for r in sim.requests.values())
    assert seen and max(seen) <= slots and len(table.resident) <= slots
