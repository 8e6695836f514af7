"""The adapters kind's slot eviction orders on hand-built views."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.adapters import AdapterSlotView, AdaptersPolicy, SlotEvictionDecision, SlotPoolView, check_decision
from policies.adapters.lora import LoraPolicy
from policies.adapters.scute import ScutePolicy

A = AdapterSlotView("a", loaded_at=1, last_used=9, uses=5)
B = AdapterSlotView("b", loaded_at=3, last_used=4, uses=1)
C = AdapterSlotView("c", loaded_at=2, last_used=7, uses=1)
BASE = AdapterSlotView(None, loaded_at=0, last_used=0, uses=0)


@pytest.mark.parametrize(("order", "want"), [("lru", "b"), ("fifo", "a"), ("lfu", "b")])
def test_each_order_picks_its_victim(order, want):
    view = SlotPoolView((A, B, C, BASE), now=10)
    for cls in (ScutePolicy, LoraPolicy):
        policy = cls(eviction=order)
        assert isinstance(policy, AdaptersPolicy)
        assert view.candidates[policy.choose_victim(view).index].name == want


def test_lfu_breaks_ties_by_recency_and_base_only_when_alone():
    view = SlotPoolView((C, B), now=10)
    assert view.candidates[ScutePolicy(eviction="lfu").choose_victim(view).index].name == "b"
    only_base = SlotPoolView((BASE,), now=10)
    assert ScutePolicy().choose_victim(only_base).index == 0


def test_needs_say_which_host_path():
    assert ScutePolicy.needs.mixed_methods and not LoraPolicy.needs.mixed_methods


def test_unknown_order_and_bad_decision_are_refused():
    with pytest.raises(ValueError, match="mru"):
        ScutePolicy(eviction="mru")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="candidate 2 of 2"):
        check_decision(SlotPoolView((A, B), now=1), SlotEvictionDecision(2))


views = st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50), st.integers(0, 9)), min_size=1, max_size=8)


@given(views, st.booleans(), st.sampled_from(["lru", "fifo", "lfu"]))
def test_choice_is_a_candidate_never_base_while_another_may_go(rows, with_base, order):
    cands = [AdapterSlotView(f"x{i}", min(a, b), max(a, b), u) for i, (a, b, u) in enumerate(rows)]
    if with_base:
        cands.insert(len(cands) // 2, BASE)
    view = SlotPoolView(tuple(cands), now=60)
    d = check_decision(view, ScutePolicy(eviction=order).choose_victim(view))
    assert view.candidates[d.index].name is not None
    # deterministic and independent of the candidates' order
    assert view.candidates[d.index] == SlotPoolView(tuple(reversed(cands)), 60).candidates[
        ScutePolicy(eviction=order).choose_victim(SlotPoolView(tuple(reversed(cands)), 60)).index]
