"""Tier policies (``policies/tier/``) on hand-built placement views."""

from __future__ import annotations

import pytest

from policies.feedback import FinishedView
from policies.tier import Home, PlacementView, TierPolicy, check_home
from policies.tier.exclusive import ExclusivePolicy
from policies.tier.flatcake import FlatCakePolicy
from policies.tier.hierarchical import HierarchicalPolicy
from policies.tier.ssd_only import SsdOnlyPolicy

HOST, SSD = 10_000, 100_000


def block(session: str | None = "s", *, tokens: int = 64, prefix: int = 0, shared: bool = False,
          session_tokens: int = 1000, turns: int = 1, host_free: int = HOST, ssd_free: int = SSD,
          ssd: int = SSD, now: float = 0.0) -> PlacementView:
    return PlacementView(tokens=tokens, prefix_tokens=prefix, shared=shared, session_id=session,
                         session_tokens=session_tokens, session_turns=turns, last_reply_tokens=0,
                         host_free_tokens=host_free, host_capacity_tokens=HOST, ssd_free_tokens=ssd_free,
                         ssd_capacity_tokens=ssd, now=now)


def finished(session: str, n_in: int, n_out: int, now: float) -> FinishedView:
    return FinishedView(rid=f"{session}-{now}", now=now, num_input_tokens=n_in, num_output_tokens=n_out,
                        session_id=session)


@pytest.mark.parametrize("policy", [HierarchicalPolicy(), SsdOnlyPolicy(), ExclusivePolicy(), FlatCakePolicy()])
def test_every_option_is_a_tier_policy_answering_a_home_the_host_has(policy):
    assert isinstance(policy, TierPolicy)
    for view in (block(), block(shared=True), block(None), block(host_free=0)):
        assert check_home(policy.place(view), view) in Home


def test_the_built_in_hierarchies():
    assert HierarchicalPolicy().place(block()) is Home.BOTH
    assert HierarchicalPolicy().place(block(ssd=0, ssd_free=0)) is Home.MEMORY
    assert SsdOnlyPolicy().place(block()) is Home.SSD
    assert ExclusivePolicy().place(block()) is Home.MEMORY and ExclusivePolicy.needs.demote
    assert not HierarchicalPolicy.needs.demote and FlatCakePolicy.needs.sessions and FlatCakePolicy.needs.segments
    assert not any(p.needs.segments for p in (HierarchicalPolicy, SsdOnlyPolicy, ExclusivePolicy))


def test_check_home_refuses_ssd_on_a_host_without_one():
    with pytest.raises(ValueError, match="no SSD level"):
        check_home(Home.SSD, block(ssd=0, ssd_free=0))
    with pytest.raises(ValueError, match="must answer a Home"):
        check_home("ssd", block())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="session_turns"):
        block(turns=0)


def test_flatcake_keeps_shared_prefixes_and_short_exchanges_in_memory_while_it_has_room():
    policy = FlatCakePolicy()
    assert policy.place(block("a", shared=True, host_free=0)) is Home.MEMORY
    assert policy.place(block(None)) is Home.MEMORY
    assert policy.place(block(None, host_free=10)) is Home.SSD
    # no SSD level: memory whatever the prediction
    assert policy.place(block("big", session_tokens=50_000, ssd=0, ssd_free=0)) is Home.MEMORY


def test_flatcake_chooses_a_sessions_home_once():
    policy = FlatCakePolicy(ssd_session_tokens=32768)
    # a small session (prior: 4x its context) starts in memory and stays there when memory fills
    assert policy.place(block("chat", session_tokens=2000)) is Home.MEMORY
    assert policy.place(block("chat", prefix=64, session_tokens=2000, host_free=0, now=1)) is Home.MEMORY
    # a session predicted past the threshold goes to SSD, and stays there when memory frees up
    assert policy.place(block("agent", session_tokens=10_000)) is Home.SSD
    assert policy.place(block("agent", prefix=9000, session_tokens=12_000, turns=2, now=2)) is Home.SSD
    # a small session arriving when memory is full starts on SSD
    assert policy.place(block("late", session_tokens=500, host_free=0, now=3)) is Home.SSD


def test_flatcake_learns_session_lifetimes_from_finished_sessions():
    policy = FlatCakePolicy(ssd_session_tokens=32768, idle_timeout_s=100, min_history=8)
    for i in range(8):  # sessions that start at 1,000 tokens and grow to 60,000 over 30 turns
        for turn in range(30):
            context = 1000 + turn * 2000
            policy.observe_finished(finished(f"old{i}", context, 100, now=i * 10 + turn * 0.1))
    assert len(policy.predictor.samples) == 0  # still live: nothing learned yet
    # 200 s later they have all ended (idle) and taught the predictor
    assert policy.place(block("new", session_tokens=1000, now=300)) is Home.SSD
    assert len(policy.predictor.samples) == 8 and not {f"old{i}" for i in range(8)} & set(policy.sessions)
    # with no history, the prior (4x) keeps a 1,000-token session in memory
    assert FlatCakePolicy().place(block("new", session_tokens=1000)) is Home.MEMORY


def test_flatcake_is_deterministic_and_bounded():
    views = [block(f"s{i % 5}", session_tokens=1000 * (1 + i % 7), host_free=HOST - 900 * i, now=float(i))
             for i in range(12)]
    a, b = FlatCakePolicy(max_sessions=3), FlatCakePolicy(max_sessions=3)
    assert [a.place(v) for v in views] == [b.place(v) for v in views]
    assert len(a.sessions) <= 3
