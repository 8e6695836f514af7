"""A kind is a recipe: a toy kind defined entirely inside ``tests/`` (``tests/toykind``)
composes, runs in the simulator and is installed by the plugin on real SGLang classes,
with no file outside ``tests/`` naming it (``docs/adding-a-kind.md``)."""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.seams import sglang_env  # noqa: F401  (installs the sgl_kernel stub)

# isort: split
# NOTE: everything below may import SGLang: the stub must be in place first.

from sglang.srt.managers import scheduler as sglang_scheduler
from sglang.srt.plugins.hook_registry import HookRegistry, HookType

from bench.config import compose_bench, resolve_bench
from bench.run import run_bench
from compose.config import ConfigError, compose
from compose.kinds import kinds, register_kind, unregister_kind
from compose.specs import describe_policies
from server.resolve import resolve
from server.sglang.launch import plugin
from server.sglang.launch.args import sglang_fields, validate
from tests.data import default_data_root, needs_data
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


def test_the_plugin_installs_the_toy_on_sglangs_scheduler(toy, monkeypatch):
    monkeypatch.setattr(HookRegistry, "_hooks", defaultdict(list))
    monkeypatch.setattr(HookRegistry, "_patched", set())
    assert plugin.SCHEDULER_MODULE in sys.modules
    plugin.install(server_plan(toy, "toy.every=1"))
    hooks = HookRegistry._hooks
    assert [t for t, _, _ in hooks[plugin.SCHEDULER_TARGET]] == [HookType.REPLACE]
    assert [t for t, _, _ in hooks[bindings.HOOKED]] == [HookType.AROUND]
    (policy,) = bindings.BUILT

    # Applied the way SGLang applies its plugins' hooks, on the real Scheduler class.
    original = sglang_scheduler.Scheduler.get_next_batch_to_run
    monkeypatch.setattr(sglang_scheduler.Scheduler, "get_next_batch_to_run", original)  # NOTE: undone after
    HookRegistry._apply_target(bindings.HOOKED, hooks[bindings.HOOKED])
    assert sglang_scheduler.Scheduler.get_next_batch_to_run is not original
    assert [sglang_scheduler.Scheduler.get_next_batch_to_run(object()) for _ in range(3)] == [None] * 3
    assert policy.decided == 3  # every=1 holds each pass: SGLang's own pick never ran


def test_a_chosen_kind_this_process_does_not_know_fails_naming_it(toy):
    plan = server_plan(toy)
    unregister_kind(TOY.group)  # NOTE: as in an SGLang process that never imported the toy's modules
    try:
        with pytest.raises(ConfigError, match=r"\+toy was chosen but this process .* has no kind 'toy'"):
            plugin.install(plan)
        with pytest.raises(ConfigError, match=r"\+toy was chosen"):
            sglang_fields(plan)
    finally:
        register_kind(TOY)


def test_the_toys_contract_row_is_checked_at_startup(toy, monkeypatch):
    from server.sglang.launch import contract

    assert bindings.HOOKED in {s.path for s in contract.all_symbols()}
    assert contract.problems() == []
    monkeypatch.delattr(sglang_scheduler.Scheduler, "get_next_batch_to_run")
    assert any(bindings.HOOKED in p for p in contract.problems())
