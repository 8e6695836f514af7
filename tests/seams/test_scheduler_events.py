"""The scheduler subclass is a fixed dispatcher: the bindings' seams subscribe to its
events by their faces (``server/sglang/scheduling/events.py``), on real SGLang classes."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from .sglang_env import make_req, publish_test_server_args

# isort: split
# (SGLang only after .sglang_env, which installs the sgl_kernel stub)
from sglang.srt.managers.schedule_policy import PrefillAdder
from sglang.srt.mem_cache.radix_cache import RadixCache

from compose.config import compose
from policies.admission.max_queue import MaxQueuePolicy
from server.resolve import resolve
from server.sglang.launch.binding import SchedulerParts, chosen
from server.sglang.scheduling.events import GatesArrival, OnBatchFinished, OnBatchFormed, OnQueued, WrapsPrefillAdder
from server.sglang.scheduling.gate import AdmissionGate
from server.sglang.scheduling.ordering import SwitchboardSchedulePolicy
from server.sglang.scheduling.scheduler import install_seams
from server.sglang.scheduling.state import RequestState, scheduler_state, state_of


@pytest.fixture(autouse=True)
def sglang_config():
    publish_test_server_args()
    yield


def fake_scheduler() -> Any:
    """The attributes ``install_seams`` reads from SGLang's scheduler."""
    return SimpleNamespace(schedule_policy="fcfs", tree_cache=RadixCache.create_simulated(),
                           enable_hierarchical_cache=False, enable_priority_scheduling=False,
                           schedule_low_priority_values_first=False, max_prefill_tokens=16384,
                           chunked_prefill_size=8192, dllm_config=None, waiting_queue=[])


class Recorder:
    """A seam with every face but the gate's and the round host's."""

    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    def on_queued(self, req: Any) -> None:
        self.log.append(f"{self.name}:queued:{req.rid}")

    def on_admitted(self, req: Any) -> None:
        self.log.append(f"{self.name}:admitted:{req.rid}")

    def batch_formed(self, batch: Any, prefill: bool) -> None:
        self.log.append(f"{self.name}:formed")

    def batch_finished(self, batch: Any, prefill: bool) -> None:
        self.log.append(f"{self.name}:finished")

    def adder_class(self, base: type) -> type:
        return type(f"{self.name}Adder", (base,), {})


def test_seams_subscribe_by_their_faces_in_binding_order():
    log: list[str] = []
    parts = SchedulerParts(seams=[lambda s: Recorder(log, "a"), lambda s: None, lambda s: Recorder(log, "b")])
    s = fake_scheduler()
    state = install_seams(s, parts)
    assert scheduler_state(s) is state and isinstance(s.policy, SwitchboardSchedulePolicy)
    assert [x.name for x in state.on_queued] == [x.name for x in state.on_batch_formed] == ["a", "b"]
    assert [x.name for x in state.on_batch_finished] == ["a", "b"]
    assert state.gate is None and state.rounds is None  # a factory's None subscribes nothing
    adder: type = PrefillAdder
    for seam in state.adders:
        adder = seam.adder_class(adder)
    assert adder.__name__ == "bAdder" and adder.__mro__[1].__name__ == "aAdder"  # the last wraps outermost


def test_the_admission_binding_subscribes_its_gate_and_the_gate_owns_arrival_alone():
    plan = resolve(compose(["server.device=cpu", "+admission=max_queue", "admission.max_waiting=1"]))
    parts = SchedulerParts()
    for spec, binding in chosen(plan):
        binding.install(spec, plan, parts)
    s = fake_scheduler()
    s.running_batch = SimpleNamespace(reqs=[])
    s.max_total_num_tokens = 1000
    s.token_to_kv_pool_allocator = SimpleNamespace(available_size=lambda: 1000)
    state = install_seams(s, parts)
    assert isinstance(state.gate, AdmissionGate) and isinstance(state.gate, GatesArrival | WrapsPrefillAdder)
    assert [type(p) for p in parts.policies] == [MaxQueuePolicy] and s.policy.gate is state.gate
    assert not isinstance(state.gate, OnQueued | OnBatchFormed | OnBatchFinished)
    with pytest.raises(RuntimeError, match="two seams own the arrival event"):
        install_seams(fake_scheduler(), SchedulerParts(seams=parts.seams * 2))


def test_a_request_carries_one_state_record():
    req = make_req("r", [1, 2, 3])
    state = state_of(req)
    assert isinstance(state, RequestState) and state_of(req) is state
    assert [k for k in vars(req) if k.startswith("_switchboard")] == ["_switchboard"]
