"""The hook contract: every SGLang symbol the adapter needs is checked at startup."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.seams import sglang_env  # noqa: F401  (installs the sgl_kernel stub)

# isort: split
# (SGLang only after the stub)
from sglang.srt.managers import scheduler as sglang_scheduler

from compose.config import compose
from server.auth import Keys
from server.resolve import resolve
from server.sglang.launch import contract, plugin
from server.sglang.launch import main as launch
from server.sglang.launch.env import PLAN_ENV

# NOTE: the repository's server/sglang/ (parents[2]: tests/seams/ -> the repository)
ADAPTER_DIR = Path(__file__).resolve().parents[2] / "server" / "sglang"


def test_installed_sglang_satisfies_the_contract():
    assert contract.problems() == []


def test_every_sglang_symbol_the_adapter_imports_is_in_the_contract():
    """NOTE: a symbol used by the adapter but not verified would fail silently."""
    import ast
    import importlib
    import types

    listed = {s.path for s in contract.all_symbols()}
    covered = listed | {p.rsplit(".", 1)[0] for p in listed}  # a class whose method is listed
    unlisted = []
    paths = sorted(ADAPTER_DIR.rglob("*.py"))
    assert len(paths) > 20  # NOTE: the walk reaches every seam folder
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sglang"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    obj = getattr(importlib.import_module(node.module), alias.name)
                    if isinstance(obj, types.ModuleType):
                        continue  # attributes used through a module object are listed individually
                    if full not in covered:
                        unlisted.append(f"{path.relative_to(ADAPTER_DIR)}: {full}")
    assert not unlisted, f"SGLang symbols used but in no contract row: {unlisted}"


def plan_file(tmp_path, *overrides):
    plan = resolve(compose(["server.device=cpu", *overrides])).with_model_path(str(tmp_path))
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    return plan, path


def test_missing_hooked_symbol_fails_startup_with_a_clear_message(monkeypatch, tmp_path, capsys):
    monkeypatch.delattr(sglang_scheduler.Scheduler, "init_schedule_policy")
    plan, path = plan_file(tmp_path, "+policy=shortest_prefill")
    with pytest.raises(contract.HookContractError) as err:
        launch.prepare(plan, Keys())
    message = str(err.value)
    assert "pinned to sglang==0.5.23" in message
    assert "sglang.srt.managers.scheduler.Scheduler.init_schedule_policy is missing" in message

    # The SGLang main process exits with the message (status 3) before serving.
    monkeypatch.setenv(PLAN_ENV, str(path))
    assert launch.main() == launch.EXIT_CONTRACT
    assert "init_schedule_policy is missing" in capsys.readouterr().err

    # In every other SGLang process that runs the scheduler the plugin stops the process:
    # SGLang's plugin loader swallows Exceptions, so the plugin raises SystemExit.
    with pytest.raises(SystemExit, match="init_schedule_policy is missing"):
        plugin.register()


def test_the_plugin_leaves_a_process_without_the_scheduler_alone(monkeypatch, tmp_path):
    """The detokenizer never imports SGLang's scheduler module and runs no hook: the plugin
    neither verifies (which would import the scheduler stack) nor installs there."""
    monkeypatch.delattr(sglang_scheduler.Scheduler, "init_schedule_policy")
    _, path = plan_file(tmp_path, "+policy=shortest_prefill")
    monkeypatch.setenv(PLAN_ENV, str(path))
    monkeypatch.delitem(sys.modules, plugin.SCHEDULER_MODULE)
    plugin.register()  # a broken contract, yet nothing checked and nothing raised
    assert plugin.SCHEDULER_MODULE not in sys.modules


def test_changed_signature_is_reported(monkeypatch):
    def calc_priority(self, waiting_queue):  # lost two parameters
        return None

    monkeypatch.setattr(sglang_scheduler.SchedulePolicy, "calc_priority", calc_priority)
    found = contract.problems()
    assert any("SchedulePolicy.calc_priority has parameters ('self', 'waiting_queue')" in p for p in found)


def test_plugin_is_inert_without_a_switchboard_plan(monkeypatch):
    monkeypatch.delenv(PLAN_ENV, raising=False)
    monkeypatch.delattr(sglang_scheduler.Scheduler, "init_schedule_policy")
    plugin.register()  # no plan: nothing verified, nothing installed, no error


def test_a_kinds_own_rows_are_checked_whether_or_not_it_is_chosen(monkeypatch, tmp_path):
    from sglang.srt.lora.mem_pool import LoRAMemoryPool

    monkeypatch.delattr(LoRAMemoryPool, "prepare_lora_batch")  # a row of the adapters kind's binding
    plan, _ = plan_file(tmp_path)  # no +adapters chosen
    with pytest.raises(contract.HookContractError, match="LoRAMemoryPool.prepare_lora_batch is missing"):
        launch.prepare(plan, Keys())
