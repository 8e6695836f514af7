"""Forced flags are data: every SGLang field an option sets is listed, with its reason.

The argument builder (``server/sglang/launch/args.py``) sets what the chosen
options' bindings return (``ForcedFlag``); these tests fail when a field ends up
in SGLang's arguments that neither the user nor the device defaults set and no
option lists, and when a binding tries to write the fields itself.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from compose.catalog import groups
from compose.config import CONFIG_NAME, ConfigError, compose
from server.options import forced_note
from server.resolve import LaunchPlan, resolve
from server.sglang.launch.args import controls, forced_flags, launch_fields
from server.sglang.launch.binding import ForcedFlag, LaunchFields

#: Fields the CPU device sets for stock and every option alike (``args.launch_fields``).
DEVICE_DEFAULTS = {"cuda_graph_backend_decode", "cuda_graph_backend_prefill", "max_mamba_cache_size",
                   "hicache_io_backend", "hicache_mem_layout", "dtype"}

#: What an option needs besides itself to compose (a diffusion LM, adapter slots).
EXTRA = {
    ("policy", "dwise"): ["model=sdar_tiny"],
    ("adapters", "lora"): ["adapters.max_rank=8", "adapters.target_modules=[q_proj,v_proj]"],
    ("adapters", "scute"): ["adapters.max_rank=8", "adapters.target_modules=[q_proj,v_proj]"],
    **{("tier", o): ["tier.ssd_dir=/tmp/switchboard-test-ssd", "tier.ssd_gb=0.001"] for o in ("ssd_only", "flatcake")},
    ("tier", "exclusive"): ["tier.ssd_dir=/tmp/switchboard-test-ssd", "tier.ssd_gb=0.001", "tier.storage=segments"],
    ("cache", "histate"): ["model=lfm2_tiny", "cache.snapshot_dir=/tmp/switchboard-test-snapshots",
                           "cache.snapshot_gb=0.001"],
}
#: What an option needs besides itself in the simulator, where it differs from the server's (a hybrid model).
SIM_EXTRA = {("cache", "histate"): ["sim.hybrid.enabled=true", "cache.snapshot_gb=0.001"]}


def _options() -> list[tuple[str, str]]:
    return [(g.name, o.name) for g in groups(CONFIG_NAME) if g.kind for o in g.options]


def _plan(*overrides: str) -> LaunchPlan:
    return resolve(compose(["server.device=cpu", *overrides]))


@pytest.mark.parametrize(("group", "option"), _options())
def test_every_field_an_option_sets_is_listed_with_its_reason(group, option):
    plan = _plan(f"+{group}={option}", *EXTRA.get((group, option), []))
    built = launch_fields(plan)
    fields: dict[str, Any] = built.result()
    listed = {f.flag.field: f.flag.value for f in built.forced}
    # NOTE: what neither the user (plan.sglang) nor the device's defaults set is an option's doing
    untold = {k: v for k, v in fields.items()
              if k not in DEVICE_DEFAULTS and v != plan.sglang.get(k, plan.device_defaults.get(k, object()))}
    assert untold.keys() <= listed.keys()  # NOTE: a field set but not listed fails here
    assert all(fields[k] == v for k, v in listed.items())
    for forced in built.forced:
        assert forced.flag.why and forced.option.startswith(f"+{group} ")
        assert f"sglang.{forced.flag.field}=" in forced.line()


def test_a_device_default_yields_to_an_options_need():
    """server.cpu_sglang caps running requests at 8; DWISE's slots are its own (32)."""
    assert launch_fields(_plan()).result()["max_running_requests"] == 8
    assert launch_fields(_plan("+policy=dwise", "model=sdar_tiny")).result()["max_running_requests"] == 32
    with pytest.raises(ConfigError, match="max_running_requests=8 conflicts with"):
        launch_fields(_plan("+policy=dwise", "model=sdar_tiny", "sglang.max_running_requests=8"))


@pytest.mark.parametrize(("written", "asked", "served"), [
    ({"dtype": "float32"}, "auto", "float32"), ({"torch_dtype": "float32"}, "auto", "float32"), ({}, "auto", "float32"),
    ({"dtype": "bfloat16"}, "auto", "auto"), ({"dtype": "float32"}, "float16", "float16"),
    ({"dtype": "float32"}, "bfloat16", "bfloat16")])
def test_on_cpu_auto_keeps_a_float32_checkpoint_in_float32(tmp_path, written, asked, served):
    """SGLang's auto would serve a float32 checkpoint in float16; on CPU auto keeps its dtype,
    and an explicit model.dtype or a 16-bit checkpoint is SGLang's own."""
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], **written}))
    plan = _plan(f"model.path={tmp_path}", f"model.dtype={asked}")
    assert launch_fields(plan).result()["dtype"] == served


def test_stock_forces_nothing():
    assert forced_flags(_plan()) == [] and controls(_plan()) == []


def test_penelope_is_compared_with_stock_under_its_page_size_and_without_overlap():
    assert controls(_plan("+cache=penelope")) == ["sglang.page_size=1", "sglang.disable_overlap_schedule=true"]
    lines = [f.line() for f in forced_flags(_plan("+cache=penelope"))]
    assert any("disable_overlap_schedule=true" in line and "checkpoint" in line for line in lines)
    assert any("radix_cache_backend=switchboard_gap" in line and "[the option itself]" in line for line in lines)


def test_a_users_conflicting_value_names_the_option_and_the_reason():
    with pytest.raises(ConfigError, match=r"sglang.disable_overlap_schedule=False conflicts with \+cache "
                                          r"\(PenelopePolicy\): a gap chunk's checkpoint"):
        launch_fields(_plan("+cache=penelope", "sglang.disable_overlap_schedule=false"))


def test_a_user_may_set_a_forced_flag_to_the_same_value_and_it_stays_listed():
    forced = forced_flags(_plan("+cache=penelope", "sglang.page_size=1"))
    assert ForcedFlag("page_size", 1, "the gap cache cuts gaps per token") in [f.flag for f in forced]


def test_bindings_cannot_write_the_fields():
    launch = LaunchFields(_plan(), {"page_size": 1})
    with pytest.raises(TypeError):
        launch.fields["page_size"] = 16  # type: ignore[index]


def test_the_readme_note_states_the_flags_or_why_it_cannot():
    assert "`sglang.disable_overlap_schedule=true` (a gap chunk" in forced_note("cache", "penelope")
    assert "stock runs it too" in forced_note("cache", "penelope")
    assert forced_note("admission", "basin") == ""
    assert "refused" in forced_note("policy", "dwise")


@pytest.mark.parametrize(("group", "option"), _options())
def test_the_simulator_turns_the_overlap_scheduler_off_where_the_server_does(group, option):
    """One rule on both roads: the simulated server runs without SGLang's overlap scheduler
    (and is charged for it, ``bench/sim/overlap.overlap_charged``) exactly when the server forces it off."""
    from bench.config import compose_bench, resolve_bench
    from bench.sim.binding import Scope, sim_parts

    extra = EXTRA.get((group, option), [])
    server_off = any(f.flag.field == "disable_overlap_schedule" and f.flag.value is True
                     for f in forced_flags(_plan(f"+{group}={option}", *extra)))
    sim_extra = SIM_EXTRA.get((group, option)) or (
        ["sim.dllm.enabled=true"] if "model=sdar_tiny" in extra else [e for e in extra if e.startswith(("+", "tier."))])
    settings = resolve_bench(compose_bench([f"+{group}={option}", *sim_extra]))
    assert bool(sim_parts(settings, Scope.replica).overlap_off) == server_off


def test_stock_under_an_options_forced_flags_runs_in_the_simulator_too():
    """The control row on both roads: the user's flag turns the overlap scheduler off in the
    simulated server as on the live one, charged as an option that forces it is."""
    from bench.config import compose_bench, resolve_bench
    from bench.run import run_bench
    from bench.sim.binding import Scope, sim_parts

    window = ["trace=azure_conversation", "trace.window_start_s=1800", "trace.window_end_s=1830",
              "output.progress=false", "output.plots=false"]
    stock = resolve_bench(compose_bench(window))
    control = resolve_bench(compose_bench([*window, "sim.disable_overlap_schedule=true"]))
    assert sim_parts(stock, Scope.replica).overlap_off == []
    assert sim_parts(control, Scope.replica).overlap_off == [
        "sim.disable_overlap_schedule (as sglang.disable_overlap_schedule=true)"]
    # the H100 profile's 1.1x per iteration: the same requests take longer without the overlap
    fast, slow = run_bench(stock), run_bench(control)
    assert slow["meta"]["overlap_off"] and "overlap_off" not in fast["meta"]
    assert slow["summary"]["e2e_s"]["mean"] > 1.02 * fast["summary"]["e2e_s"]["mean"]


@pytest.mark.parametrize("option", ["+cache=penelope", "+cache=histate"])
def test_caches_keeping_sglangs_waiting_refresh_pin_the_name_it_runs_under(option: str):
    extra = EXTRA.get(("cache", option.split("=")[1]), [])
    lines = [f.line() for f in forced_flags(_plan(option, *extra))]
    assert any("radix_eviction_policy=lru" in line and "refreshes" in line for line in lines)
    with pytest.raises(ConfigError, match=r"sglang.radix_eviction_policy=lfu conflicts with \+cache"):
        launch_fields(_plan(option, *extra, "sglang.radix_eviction_policy=lfu"))

