"""The diffusion round shape: one rule, stated in policies/scheduling/rounds.py, read by both hosts."""

from __future__ import annotations

import inspect

from policies.scheduling import RoundsNeeds, SchedulingNeeds
from policies.scheduling.dwise import DwisePolicy
from policies.scheduling.rounds import round_shape


def test_the_order_fixes_slots_and_blocks_else_the_host_does():
    assert round_shape(SchedulingNeeds(rounds=RoundsNeeds(slots=32, round_blocks=8)), 4) == (32, 8)
    assert round_shape(SchedulingNeeds(rounds=RoundsNeeds(slots=32)), 4) == (32, 32)
    assert round_shape(SchedulingNeeds(rounds=RoundsNeeds()), 4) == (4, 4)
    # SGLang's own order keeps the host's slots and budget
    assert round_shape(SchedulingNeeds(sglang_native="fcfs", rounds=RoundsNeeds(slots=32, round_blocks=8)), 4) == (4, 4)
    rounds = DwisePolicy().needs.rounds
    assert rounds is not None and round_shape(DwisePolicy().needs, 1) == (rounds.slots, rounds.round_blocks)


def test_both_hosts_read_the_one_rule():
    """NOTE: neither host restates it (issue 44: it was written in each)."""
    from bench.sim.dllm import build
    from server.sglang.scheduling import dllm

    for module in (build, dllm):
        source = inspect.getsource(module)
        assert "round_shape(" in source and "round_blocks or" not in source, module.__name__
