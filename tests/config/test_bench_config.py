"""``python -m bench``: composition from ``conf/``, typed errors, and the CLI end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.config import compose_bench, resolve_bench
from bench.traces.paths import default_data_root
from compose.config import ConfigError, group_options
from tests.data import needs_data

DOCUMENTED = [
    [],
    ["trace=mooncake_conversation", "+policy=fcfs", "+cache=lru"],
    ["trace=azure_conversation", "+policy=lpm", "+cache=lfu"],
    ["trace.time_scale=2", "accelerator=h200", "model_profile=qwen3-32b"],
    ["+policy=dfs-weight", "+admission=max_queue", "admission.max_waiting=8"],
    ["trace.surges=[{start_s:600,end_s:900,factor:3}]"],
    ["accelerator=cpu", "model_profile=smollm2-135m"],
]


@pytest.mark.parametrize("overrides", DOCUMENTED, ids=lambda o: " ".join(o) or "bare")
def test_documented_command_lines_compose(overrides):
    s = resolve_bench(compose_bench(overrides))
    assert s.trace.name and s.accelerator.name and s.model_profile.name


@pytest.mark.parametrize("group", ["trace", "accelerator", "model_profile"])
def test_every_option_of_the_bench_groups_composes(group):
    for option in group_options(group):
        if (group, option) == ("trace", "simple"):
            # NOTE: one's own trace: the option names no file, and saying none is a clear error
            with pytest.raises(ConfigError, match="'trace.path'.*missing mandatory value"):
                resolve_bench(compose_bench(["trace=simple"]))
            s = resolve_bench(compose_bench(["trace=simple", "trace.path=/data/mine.jsonl"]))
            assert s.trace.path == "/data/mine.jsonl"
        else:
            s = resolve_bench(compose_bench([f"{group}={option}"]))
        assert getattr(s, group).name == option


def test_unchosen_policy_kinds_are_absent():
    s = resolve_bench(compose_bench([]))
    assert s.policies == {} and s.build("policy") is None
    assert all("sglang built-in" in line for line in s.describe())


@pytest.mark.parametrize("override,message", [
    ("trace.time_scle=2", "unknown config key 'trace.time_scle'"),
    ("trace.time_scale=fast", "invalid value for 'trace.time_scale'"),
    ("sim.max_total_tokens=1.5", "invalid value for 'sim.max_total_tokens'"),
    ("accelerator=tpu", "unknown option 'tpu' for accelerator= "),
    ("+policy=nope", "unknown option 'nope' for +policy="),
    ("trace.format=parquet", "invalid value for 'trace.format'"),
    ("+policy=lpm policy.k=3", "unknown config key 'policy.k'"),
])
def test_mistakes_fail_at_composition_naming_the_field(override, message):
    with pytest.raises(ConfigError) as err:
        resolve_bench(compose_bench(override.split()))
    assert message in str(err.value) and "\n" not in str(err.value)


def _bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


MOONCAKE_DATA = needs_data(default_data_root() / "mooncake")


@MOONCAKE_DATA
def test_cli_writes_one_results_folder(tmp_path):
    proc = _bench(tmp_path, "trace.window_end_s=60", "+policy=lpm", "output.progress=false")
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = (tmp_path / "results" / "bench").iterdir()
    for name in ("metrics.json", "summary.md", "requests.csv", "ttft_cdf.png", "windows.png"):
        assert (run_dir / name).stat().st_size > 0, name
    result = json.loads((run_dir / "metrics.json").read_text())
    assert result["summary"]["finished"] == result["summary"]["requests"] > 100
    assert result["meta"]["policies"]["policy"]["target"].endswith("LpmPolicy")
    assert "| TTFT p99 |" in (run_dir / "summary.md").read_text()


@MOONCAKE_DATA
def test_cli_multirun_sweeps_policies(tmp_path):
    proc = _bench(tmp_path, "-m", "+policy=fcfs,shortest_prefill", "trace.window_end_s=30",
                  "output.plots=false", "output.progress=false")
    assert proc.returncode == 0, proc.stderr
    runs = sorted(p.parent.name for p in (tmp_path / "results").rglob("metrics.json"))
    assert len(runs) == 2 and "fcfs" in runs[0] and "shortest_prefill" in runs[1]


def test_cli_config_mistake_is_one_line_and_exit_2(tmp_path):
    proc = _bench(tmp_path, "trace.time_scle=2")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("bench: config error: unknown config key 'trace.time_scle' (valid keys: "
                                   "name, format, path, window_start_s, window_end_s, time_scale, surges, "
                                   "seed, claude_code, mooncake, servegen, simple)")
    assert not (tmp_path / "results").exists()
