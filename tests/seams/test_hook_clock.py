"""The hook clock (``server/sglang/scheduling/hook_clock.py``): Switchboard's time inside
SGLang's scheduler, by hook, and busy iterations, pushed to prometheus counters."""

from __future__ import annotations

import time
from array import array
from typing import Any, ClassVar

import pytest

from .sglang_env import publish_test_server_args

# isort: split
# (SGLang only after .sglang_env, which installs the sgl_kernel stub)
from prometheus_client import REGISTRY
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.mem_cache.radix_cache import RadixCache
from sglang.srt.sampling.sampling_params import SamplingParams

from policies.cache import BlockView
from policies.cache.lru import LruPolicy
from policies.scheduling import OrderDecision, QueueView, SchedulingNeeds
from server.sglang.cache.eviction import PolicyEvictionStrategy
from server.sglang.scheduling.hook_clock import HOOK_CLOCK, HOOKS, HookClock
from server.sglang.scheduling.ordering import SwitchboardSchedulePolicy

SLOW_S = 0.02


@pytest.fixture(autouse=True)
def sglang_config():
    publish_test_server_args()
    yield


def test_busy_iterations_run_from_a_boundary_that_picked_a_batch_to_the_next():
    clock = HookClock(metered=False)
    batch = object()
    for now, picked in ((0.0, batch), (1.5, None), (2.0, batch), (2.25, batch)):
        clock.boundary(now)
        clock.picked(picked)
    clock.boundary(3.0)
    # busy: [0, 1.5), [2.0, 2.25), [2.25, 3.0); idle: [1.5, 2.0)
    assert clock.busy_iterations == 3
    assert clock.busy_s == pytest.approx(1.5 + 0.25 + 0.75)


def test_turning_idle_pushes_what_grew():
    clock = HookClock()
    busy = REGISTRY.get_sample_value("switchboard_scheduler_busy_iterations_total") or 0.0
    clock.boundary(100.0)
    clock.picked(object())
    clock.boundary(100.1)  # NOTE: the first boundary pushed; this one is within the second
    clock.picked(None)  # idle: the server may sleep now, so the busy iteration is pushed
    assert REGISTRY.get_sample_value("switchboard_scheduler_busy_iterations_total") - busy == 1


def test_a_flush_pushes_what_grew_since_the_last_one():
    def exported(hook: str) -> tuple[float, float]:
        return (REGISTRY.get_sample_value("switchboard_hook_seconds_total", {"hook": hook}) or 0.0,
                REGISTRY.get_sample_value("switchboard_hook_calls_total", {"hook": hook}) or 0.0)

    clock = HookClock()
    before = exported("eviction")
    clock.add("eviction", 0.25)
    clock.add("eviction", 0.5)
    clock.flush()
    clock.flush()  # NOTE: nothing grew: nothing more is pushed
    seconds, calls = exported("eviction")
    assert seconds - before[0] == pytest.approx(0.75) and calls - before[1] == 2
    busy = REGISTRY.get_sample_value("switchboard_scheduler_busy_seconds_total") or 0.0
    clock.boundary(10.0)  # NOTE: a boundary pushes at most once per FLUSH_EVERY_S
    clock.picked(object())
    clock.boundary(10.5)
    assert (REGISTRY.get_sample_value("switchboard_scheduler_busy_seconds_total") or 0.0) == busy
    clock.picked(object())
    clock.boundary(11.5)
    assert REGISTRY.get_sample_value("switchboard_scheduler_busy_seconds_total") - busy == pytest.approx(1.5)


class SlowFcfs:
    """Arrival order, taking ``SLOW_S`` per decision: a hook whose cost the clock must see."""

    needs: ClassVar[SchedulingNeeds] = SchedulingNeeds()

    def order(self, queue: QueueView) -> OrderDecision:
        time.sleep(SLOW_S)
        return OrderDecision(tuple(r.rid for r in queue.requests))


def _queue(n: int) -> list[Any]:
    return [Req(rid=f"r{i}", origin_input_text="", origin_input_ids=array("q", [i + 1] * 8),
                sampling_params=SamplingParams(temperature=0, max_new_tokens=4)) for i in range(n)]


def test_the_queue_order_is_timed_as_the_order_hook():
    policy = SwitchboardSchedulePolicy("fcfs", RadixCache.create_simulated(), False, False, False, order=SlowFcfs())
    seconds, calls = HOOK_CLOCK.seconds["order"], HOOK_CLOCK.calls["order"]
    policy.calc_priority(_queue(3), None)
    assert HOOK_CLOCK.calls["order"] == calls + 1
    assert HOOK_CLOCK.seconds["order"] - seconds >= SLOW_S


def test_sglangs_own_order_is_not_a_hooks_time(monkeypatch):
    from sglang.srt.managers.schedule_policy import SchedulePolicy

    def slow_stock(self: Any, *args: Any, **kwargs: Any) -> None:
        time.sleep(SLOW_S)

    monkeypatch.setattr(SchedulePolicy, "calc_priority", slow_stock)
    policy = SwitchboardSchedulePolicy("fcfs", RadixCache.create_simulated(), False, False, False)
    seconds = HOOK_CLOCK.seconds["order"]
    policy.calc_priority(_queue(3), None)
    assert HOOK_CLOCK.seconds["order"] - seconds < SLOW_S / 2


def test_the_eviction_order_is_timed_per_rank():
    class SlowLru(LruPolicy):
        def rank(self, block: Any) -> Any:
            time.sleep(SLOW_S)
            return super().rank(block)

    strategy = PolicyEvictionStrategy(SlowLru())
    tree = RadixCache.create_simulated()
    seconds, calls = HOOK_CLOCK.seconds["eviction"], HOOK_CLOCK.calls["eviction"]
    strategy.get_priority(tree.root_node)
    assert HOOK_CLOCK.calls["eviction"] == calls + 1 and HOOK_CLOCK.seconds["eviction"] - seconds >= SLOW_S


@pytest.mark.parametrize("overrides", [["+cache=penelope"],
                                       ["+cache=histate", "model=lfm2_tiny", "cache.snapshot_dir=/tmp/sb-hc",
                                        "cache.snapshot_gb=0.001"]])
def test_the_caches_that_rank_themselves_get_a_timed_order(overrides: list[str], monkeypatch):
    """The gap cache and the snapshot cache call ``rank`` themselves: the binding hands them the
    order timed on the clock (``timed_ranks.py``), as the strategy seam times SGLang's trees."""
    from compose.config import compose
    from server.resolve import resolve
    from server.sglang.cache import gap_cache, histate_setup
    from server.sglang.cache.timed_ranks import TimedRanks
    from server.sglang.launch.binding import SchedulerParts, chosen

    monkeypatch.setattr(gap_cache, "_active", {})
    monkeypatch.setattr(histate_setup, "_active", {})
    plan = resolve(compose(["server.device=cpu", *overrides]))
    for spec, binding in chosen(plan):
        binding.install(spec, plan, SchedulerParts())
    (registered,) = [active["policy"] for active in (gap_cache._active, histate_setup._active) if active]
    assert isinstance(registered, TimedRanks) and registered.needs == registered.inner.needs
    block = BlockView(block_id=1, num_tokens=4, prefix_len=0, last_access=1.0, created=0.0)
    calls = HOOK_CLOCK.calls["eviction"]
    assert registered.rank(block) == registered.inner.rank(block)
    assert HOOK_CLOCK.calls["eviction"] == calls + 1


def test_every_hook_is_exported_under_its_name():
    clock = HookClock(metered=False)
    assert set(HOOKS) <= {key.split(":", 1)[1] for key in clock.totals() if key.startswith("seconds:")}
    # NOTE: bench/ may not import server/, so hook_overhead.md's script names the hooks itself
    from bench.scripts import hook_overhead

    assert hook_overhead.HOOKS == HOOKS
