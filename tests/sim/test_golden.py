"""The simulator's behaviour, pinned: one digest per configuration of every kind.

Each configuration replays a short slice of a real trace (seconds to run) and
the digest covers what the run gives, request by request at full precision
(``golden_digest``): every ``RequestRecord`` field including each token's time,
the summary and the windows, the run's meta less its wall times and local
paths, and behind a router each request's replica. A refactor of the simulator
or of a binding that changes any of it fails here, naming the configuration.

NOTE: a change that is meant to move the simulator's numbers updates the
digest in the same commit and says why in its body; print the current digests
with ``python -m tests.sim.test_golden``.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from dataclasses import fields
from typing import Any

import numpy as np
import pytest

from bench.config import compose_bench, resolve_bench
from bench.run import run_bench
from bench.traces.paths import default_data_root
from tests.data import needs_data

_DATA = default_data_root()
AZURE = ("trace=azure_conversation", "trace.window_start_s=1800", "trace.window_end_s=1860")
MOONCAKE = ("trace=mooncake_conversation", "trace.window_end_s=60", "trace.mooncake.sessions=true")
CLAUDE = ("trace=claude_code_sessions", "trace.claude_code.session_rate=0.05", "trace.claude_code.max_sessions=6")
#: A diffusion LM's block rounds on the Azure slice, shrunk as the dLLM tests shrink it.
DLLM = (*AZURE, "sim.dllm.enabled=true", "trace.time_scale=4", "live.input_scale=0.0625",
        "live.output_scale=0.125")

#: name -> overrides: the default run and one configuration per kind's headline option.
CONFIGS: dict[str, tuple[str, ...]] = {
    "default": MOONCAKE,
    "fairway": (*AZURE, "trace.time_scale=0.25", "+policy=fairway"),
    # NOTE: LEAP's features in the simulator: the true length through the live head's error model
    "leap": (*AZURE, "trace.time_scale=0.25", "+policy=leap", "policy.feature_dim=1",
             "sim.length_signal_log_std=0.5521", "sim.length_signal_log_mean=-0.1017"),
    "penelope": (*CLAUDE, "sim.max_total_tokens=300000", "+cache=penelope"),
    "flatcake": (*CLAUDE, "sim.max_total_tokens=100000", "+tier=flatcake", "tier.host_ratio=1",
                 "tier.ssd_dir=/ssd", "tier.ssd_gb=40"),
    "histate": (*CLAUDE, "sim.max_total_tokens=300000", "sim.hybrid.enabled=true", "sim.hybrid.device_states=4",
                "+cache=histate", "cache.snapshot_gb=20"),
    "basin": (*MOONCAKE, "trace.time_scale=0.25", "sim.max_total_tokens=200000", "+admission=basin"),
    "scute": (*AZURE, "+adapters=scute", "sim.adapters_count=12", "adapters.max_per_batch=4"),
    "router": (*MOONCAKE, "+router=cache_aware", "sim.replicas=3"),
    "dwise": (*DLLM, "+policy=dwise"),
    "stock_dllm": DLLM,
}

#: name -> the digest of its run at the commit that last meant to change it.
GOLDEN: dict[str, str] = {
    "basin": "08257a5f43f3c588",
    "default": "508cdd3ac66aa516",
    "dwise": "1b54ea31d1d60b85",
    "fairway": "612e293a2b0fb3db",
    "flatcake": "7dd26402b80e9735",
    "histate": "a756b825bba91d52",
    "leap": "91274a09a089beee",
    "penelope": "4f6bf5d18de45c34",
    "router": "0421fe654de9421c",
    "scute": "4b22f8bc3a9715aa",
    "stock_dllm": "4382b9c077f43af2",
}

#: Meta fields that differ from run to run or machine to machine, not with behaviour.
_VOLATILE_META = ("load_wall_s", "replay_wall_s", "trace_source")


def _canonical(value: Any) -> Any:
    """``value`` as JSON-able data, floats at full precision (``repr``)."""
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, np.ndarray):
        return _canonical(value.tolist())
    if isinstance(value, np.generic):
        return _canonical(value.item())
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    if value is None or isinstance(value, bool | int | str):
        return value
    return repr(value)


def _run(overrides: tuple[str, ...]) -> dict[str, Any]:
    """``run_bench`` of ``overrides`` (nothing written)."""
    return run_bench(resolve_bench(compose_bench([*overrides, "output.progress=false", "output.plots=false"])))


def _rows(records: list[Any]) -> list[dict[str, Any]]:
    """Every field of every ``RequestRecord``."""
    return [{f.name: getattr(r, f.name) for f in fields(r)} for r in records]


def golden_run(name: str) -> dict[str, Any]:
    """Run configuration ``name`` (nothing written); return the data its digest covers."""
    result = _run(CONFIGS[name])
    meta = {k: v for k, v in result["meta"].items() if k not in _VOLATILE_META}
    cluster = result.get("cluster")
    return {
        "records": _rows(result["records"]),
        "summary": result["summary"], "windows": result["windows"], "meta": meta,
        "replicas": None if cluster is None else dict(cluster.assignment),
    }


def golden_digest(name: str) -> str:
    """The digest of configuration ``name``'s run (first 16 hex digits of SHA-256)."""
    data = json.dumps(_canonical(golden_run(name)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(data.encode()).hexdigest()[:16]


def test_every_config_has_a_digest():
    assert set(GOLDEN) == set(CONFIGS)


@needs_data(_DATA / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv",
            _DATA / "mooncake" / "conversation_trace.jsonl", _DATA / "kv_cache_tester_cc_traces")
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_simulator_gives_what_it_gave(name):
    assert golden_digest(name) == GOLDEN.get(name), (
        f"{name}: the simulator's output changed ({' '.join(CONFIGS[name])}); if that is meant, "
        "update GOLDEN from `python -m tests.sim.test_golden` and say why in the commit")


if __name__ == "__main__":
    for config in sys.argv[1:] or sorted(CONFIGS):
        print(f'    "{config}": "{golden_digest(config)}",', flush=True)


def _records(*overrides: str) -> Any:
    return _canonical(_rows(_run(overrides)["records"]))


@needs_data(_DATA / "kv_cache_tester_cc_traces")
def test_cache_lru_replays_exactly_as_stock_sglangs_lru():
    # NOTE: a slice where SGLang's waiting-prefix refresh changes what is evicted (the control below)
    base = ("trace=claude_code_sessions", "trace.claude_code.session_rate=0.2", "trace.claude_code.max_sessions=12",
            "sim.max_total_tokens=150000")
    stock = _records(*base)
    assert _records(*base, "+cache=lru") == stock
    assert _records(*base, "sim.touch_waiting_prefixes=off") != stock
