"""A kind is a recipe: a toy kind defined entirely inside ``tests/`` (``tests/toykind``)
composes, runs in the simulator and is installed by the plugin on real SGLang classes,
with no file outside ``tests/`` naming it (``docs/adding-a-kind.md``)."""

from __future__ import annotations

import dataclasses
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.seams import sglang_env  # noqa: F401  (installs the sgl_kernel stub)

# isort: split
# NOTE: everything below may import SGLang: the stub must be in place first.

from sglang.srt.managers.schedule_policy import AddReqResult
from sglang.srt.plugins.hook_registry import HookRegistry, HookType

from bench.config import compose_bench, resolve_bench
from bench.run import run_bench
from compose.config import ConfigError, compose
from compose.kinds import kinds, register_kind, unregister_kind
from compose.specs import describe_policies
from server.resolve import LaunchPlan, resolve
from server.sglang.launch import plugin
from server.sglang.launch.args import sglang_fields, validate
from server.sglang.launch.binding import SchedulerParts, chosen
from server.sglang.scheduling.events import WrapsPrefillAdder
from server.sglang.scheduling.scheduler import install_seams
from tests.data import default_data_root, needs_data
from tests.seams.test_scheduler_events import fake_scheduler
from tests.toykind import TOY, bindings
from tests.toykind.hold import HoldPolicy

MOONCAKE = default_data_root() / "mooncake" / "conversation_trace.jsonl"


@pytest.fixture
def toy(tmp_path: Path) -> Iterator[str]:
    """Registers the toy kind and yields the override that puts its YAML on Hydra's search path."""
    conf = tmp_path / "conf" / "toy"
    conf.mkdir(parents=True)
    (conf / "hold.yaml").write_text("# Hold every third pass.\n_target_: tests.toykind.hold.HoldPolicy\n"
                                    "every: 3\nconservativeness: 0.5\n")
    register_kind(TOY)
    bindings.BUILT.clear()
    try:
        yield f"hydra.searchpath=[file://{tmp_path / 'conf'}]"
    finally:
        unregister_kind(TOY.group)
    assert TOY not in kinds()


def server_plan(toy: str, *overrides: str):
    return resolve(compose(["server.device=cpu", toy, "+toy=hold", *overrides]))


def test_the_toy_composes_with_its_needs_and_typed_parameters(toy):
    plan = server_plan(toy, "toy.every=2")
    spec = plan.policies["toy"]
    assert spec.target == "tests.toykind.hold.HoldPolicy" and spec.params == {"every": 2, "conservativeness": 0.5}
    assert spec.needs_of() == HoldPolicy(conservativeness=0.5).needs
    assert any("tests.toykind.hold.HoldPolicy" in line for line in describe_policies(plan.policies))
    with pytest.raises(ConfigError, match="toy.every"):
        server_plan(toy, "toy.every=often")


def test_the_server_binding_sets_its_launch_field_and_sglang_parses_it(toy):
    plan = server_plan(toy)
    assert sglang_fields(plan)["schedule_conservativeness"] == 0.5
    assert "--schedule-conservativeness" in validate(plan)
    with pytest.raises(ConfigError, match="sglang.schedule_conservativeness=0.9 conflicts with \\+toy"):
        sglang_fields(server_plan(toy, "sglang.schedule_conservativeness=0.9"))


@needs_data(MOONCAKE)
def test_the_simulator_calls_the_toy_on_every_finished_request(toy):
    result = run_bench(resolve_bench(compose_bench([toy, "+toy=hold", "trace.window_end_s=120"])), progress=False)
    (policy,) = bindings.BUILT
    assert result["meta"]["policies"]["toy"]["target"] == "tests.toykind.hold.HoldPolicy"
    finished = result["summary"]["finished"]
    assert finished > 0 and len(policy.finished) == finished + result["summary"].get("aborted", 0)


def test_the_plugin_installs_the_toy_as_a_seam_on_sglangs_scheduler(toy, monkeypatch):
    monkeypatch.setattr(HookRegistry, "_hooks", defaultdict(list))
    monkeypatch.setattr(HookRegistry, "_patched", set())
    assert plugin.SCHEDULER_MODULE in sys.modules
    plan = server_plan(toy, "toy.every=3")
    plugin.install(plan)
    # NOTE: the toy hooks nothing of its own: it subscribes to the scheduler's events
    assert {t: [h for h, _, _ in v] for t, v in HookRegistry._hooks.items()} == {
        plugin.SCHEDULER_TARGET: [HookType.REPLACE]}

    # The seam its binding subscribes, on a scheduler as install_seams sets it up.
    parts = SchedulerParts()
    for spec, binding in chosen(plan):
        binding.install(spec, plan, parts)
    state = install_seams(fake_scheduler(), parts)
    (seam,) = state.adders
    policy = bindings.BUILT[-1]
    assert parts.policies == [policy] and isinstance(seam, WrapsPrefillAdder)

    class Walk:  # SGLang's PrefillAdder as far as the seam touches it
        def __init__(self, *args, **kwargs):
            pass

        def add_one_req(self, req, *args, **kwargs):
            return "added"

    adder = seam.adder_class(Walk)
    assert seam.adder_class(Walk) is adder  # one subclass, not one per pass
    results = [adder().add_one_req(object()) for _ in range(6)]  # one adder per prefill pass
    assert results == ["added", "added", AddReqResult.OTHER] * 2 and policy.decided == 6 and seam.held == 2


@needs_data(MOONCAKE)
def test_the_toy_decides_in_the_simulator(toy):
    window = ["trace=mooncake_conversation", "trace.window_end_s=60", "output.progress=false"]
    held = run_bench(resolve_bench(compose_bench([toy, "+toy=hold", "toy.every=2", *window])))
    never = run_bench(resolve_bench(compose_bench([toy, "+toy=hold", "toy.every=0", *window])))
    plain = run_bench(resolve_bench(compose_bench(window)))
    assert never["summary"] == plain["summary"]  # a toy that never holds changes nothing
    policy = bindings.BUILT[0]
    assert policy.every == 2 and policy.decided > 0
    assert held["summary"]["finished"] == plain["summary"]["finished"]
    assert held["summary"]["ttft_s"]["mean"] > plain["summary"]["ttft_s"]["mean"]  # held passes delay prefills


def test_a_chosen_kind_this_process_does_not_know_fails_naming_it(toy):
    plan = dataclasses.replace(server_plan(toy), kinds=[])  # NOTE: a plan that does not carry its kinds
    unregister_kind(TOY.group)  # NOTE: as in an SGLang process that never imported the toy's modules
    try:
        with pytest.raises(ConfigError, match=r"\+toy was chosen but this process .* has no kind 'toy'"):
            plugin.install(plan)
        with pytest.raises(ConfigError, match=r"\+toy was chosen"):
            sglang_fields(plan)
    finally:
        register_kind(TOY)


def test_the_toys_contract_row_is_checked_at_startup(toy, monkeypatch):
    from sglang.srt.managers import schedule_policy

    from server.sglang.launch import contract

    assert bindings.HOOKED in {s.path for s in contract.all_symbols()}
    assert contract.problems() == []
    monkeypatch.setattr(schedule_policy, "AddReqResult", type("AddReqResult", (), {}))  # OTHER is gone
    assert any(bindings.HOOKED in p for p in contract.problems())


def test_the_plan_carries_the_toy_to_processes_that_never_registered_it(toy):
    plan = server_plan(toy)
    assert [k["group"] for k in plan.kinds] == ["toy"]
    carried = LaunchPlan.from_json(plan.to_json())
    unregister_kind(TOY.group)  # NOTE: an SGLang process: only the plan knows the toy
    assert [spec.group for spec, _ in chosen(carried)] == ["toy"] and TOY in kinds()


def test_an_installed_distribution_declares_a_kind_by_entry_point(tmp_path, monkeypatch):
    from compose.kinds import KINDS, Kind, discover_kinds
    from tests.live.test_server_toy import toy_distribution

    assert TOY not in kinds()
    monkeypatch.syspath_prepend(str(toy_distribution(tmp_path)))
    try:
        discover_kinds()
        assert TOY in kinds()
    finally:
        unregister_kind(TOY.group)
    # Kinds travel as data (LaunchPlan.kinds), host settings' class by name
    assert all(Kind.from_json(k.to_json()) == k for k in (*KINDS, TOY))
