"""Composing ``conf/bench.yaml`` and turning it into typed run settings.

The bench shares ``conf/`` with the server: the policy groups (``+policy=``,
``+cache=``, ``+admission=``) are the server's own and become objects through
``compose.specs`` exactly as in the server; the bench's own groups
(``trace``, ``accelerator``, ``model_profile``) are typed by ``bench.schema``.
A live replay (``live.endpoint``) measures the server's own policies, so
choosing simulator policies for it is a config error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from bench.schema import (
    AcceleratorConfig,
    DllmRounds,
    LiveConfig,
    MetricsConfig,
    ModelProfileConfig,
    OutputConfig,
    SimConfig,
    TraceConfig,
    register_bench_schemas,
)
from bench.traces.paths import resolve_data_root
from compose.compat import ModelInHost, ModelKind, check_host_settings, check_model_fit
from compose.config import ConfigError, compose, one_line
from compose.specs import PolicySpec, build_policy, describe_policies, specs_from_config

#: The bench's root config in ``conf/``.
BENCH_CONFIG_NAME = "bench"
#: Bench groups with a default option (overridden as ``trace=...``, no ``+``).
DEFAULT_GROUPS = ("trace", "accelerator", "model_profile")


def compose_bench(overrides: Sequence[str] = ()) -> DictConfig:
    """Compose ``conf/bench.yaml`` with ``overrides``; mistakes raise a
    one-line ``ConfigError`` naming the field or option."""
    register_bench_schemas()
    try:
        return compose(overrides, config_name=BENCH_CONFIG_NAME)
    except ConfigError as exc:
        message = str(exc)
        for group in DEFAULT_GROUPS:  # NOTE: chosen without `+`: they have defaults
            message = message.replace(f"+{group}=", f"{group}=")
        raise ConfigError(message) from exc.__cause__


@dataclass(frozen=True)
class BenchSettings:
    """A composed bench config as typed objects and built policies."""

    trace: TraceConfig
    accelerator: AcceleratorConfig
    model_profile: ModelProfileConfig
    sim: SimConfig
    live: LiveConfig
    metrics: MetricsConfig
    output: OutputConfig
    data_root: Path
    policies: dict[str, PolicySpec]
    """Chosen policy kinds by group; absent kinds behave as stock SGLang."""

    @property
    def is_live(self) -> bool:
        """Whether this run replays against a real server."""
        return self.live.endpoint is not None

    def build(self, group: str) -> Any | None:
        """The policy object chosen for ``group``, or None."""
        spec = self.policies.get(group)
        return build_policy(spec) if spec is not None else None

    def describe(self) -> list[str]:
        """One line per policy kind: the chosen class or SGLang's built-in."""
        return describe_policies(self.policies)


def _typed(node: DictConfig, cls: type) -> Any:
    obj = OmegaConf.to_object(node)
    if not isinstance(obj, cls):
        raise ConfigError(f"config node is not a {cls.__name__}")
    return obj


def resolve_bench(cfg: DictConfig) -> BenchSettings:
    """Typed settings of a composed bench config (raises ``ConfigError``)."""
    try:
        settings = BenchSettings(
            trace=_typed(cfg.trace, TraceConfig),
            accelerator=_typed(cfg.accelerator, AcceleratorConfig),
            model_profile=_typed(cfg.model_profile, ModelProfileConfig),
            sim=_typed(cfg.sim, SimConfig),
            live=_typed(cfg.live, LiveConfig),
            metrics=_typed(cfg.metrics, MetricsConfig),
            output=_typed(cfg.output, OutputConfig),
            data_root=resolve_data_root(cfg.get("data_root")),
            policies=specs_from_config(cfg),
        )
    except ConfigError:
        raise
    except Exception as exc:  # a MISSING value surfaces here, named by OmegaConf
        raise ConfigError(one_line(exc)) from exc
    _check_live(settings)
    _check_dllm(settings)
    _check_hybrid(settings)
    _check_adapters(settings)
    return settings


def _check_hybrid(s: BenchSettings) -> None:
    """One-line errors for what the hybrid-model cache (``sim.hybrid``) does not model."""
    h = s.sim.hybrid
    if not h.enabled:
        return
    if s.sim.dllm.enabled:
        raise ConfigError("sim.hybrid.enabled and sim.dllm.enabled: a model is one or the other")
    cache = s.policies.get("cache")
    kv_tier = (cache is not None and cache.host_settings().host_tier_tokens) or "tier" in s.policies
    if kv_tier:
        raise ConfigError("sim.hybrid's KV level below the device is SGLang's host pool (sim.hicache_tokens), "
                          "not cache.host_tier_tokens or +tier; its host pool of states is sim.hybrid.host_states")
    if h.marconi and cache is not None and cache.needs_of().snapshots:
        raise ConfigError("sim.hybrid.marconi models Marconi's own admission and eviction; "
                          f"+cache ({cache.target}) is another order over snapshots: choose one")
    if h.marconi_alpha < 0:
        raise ConfigError(f"sim.hybrid.marconi_alpha must be >= 0, got {h.marconi_alpha}")
    if h.state_mb <= 0 or not 0 < h.kv_fraction <= 1 or h.device_states < 0 or h.host_states < 0 \
            or h.ssd_read_gbs <= 0 or h.snapshot_every_tokens < 0:
        raise ConfigError("sim.hybrid: state_mb and ssd_read_gbs must be > 0, kv_fraction in (0, 1], "
                          "device_states, host_states and snapshot_every_tokens >= 0")


def _check_adapters(s: BenchSettings) -> None:
    """One-line errors for ``sim.adapters_*`` the run cannot use."""
    if s.is_live:
        if s.sim.adapters_count:
            # NOTE: the live client sends token ids only; it names no adapter yet.
            raise ConfigError("sim.adapters_count is simulator-only: the live replay sends no adapter names")
        return
    chosen = "adapters" in s.policies
    if s.sim.adapters_count and not chosen:
        raise ConfigError("sim.adapters_count needs +adapters (the slots' eviction order and size)")
    if chosen and ("router" in s.policies or s.sim.replicas != 1):
        raise ConfigError("+adapters is not simulated behind +router yet")


def _check_live(s: BenchSettings) -> None:
    """One-line errors for ``live.*`` values no replay could use."""
    live = s.live
    if s.is_live and s.policies:
        chosen = ", ".join(f"+{g}=" for g in s.policies)
        raise ConfigError(f"{chosen} chooses simulator policies, but live.endpoint replays against "
                          "a server running its own: start the server with them instead")
    if live.input_scale <= 0 or live.output_scale <= 0:
        raise ConfigError("live.input_scale and live.output_scale must be > 0")
    for key in ("max_input_tokens", "max_output_tokens"):
        value = getattr(live, key)
        if value is not None and value < 1:
            raise ConfigError(f"live.{key} must be >= 1 or null, got {value}")
    high = live.token_id_high if live.token_id_high is not None else s.model_profile.vocab_size
    if not 0 <= live.token_id_low < high <= s.model_profile.vocab_size:
        raise ConfigError(f"live token ids [{live.token_id_low}, {high}) must be a non-empty range "
                          f"inside the vocabulary of {s.model_profile.name} ({s.model_profile.vocab_size})")
    if live.request_timeout_s <= 0 or live.loads_interval_s < 0 or live.warmup_requests < 0:
        raise ConfigError("live.request_timeout_s must be > 0, live.loads_interval_s and "
                          "live.warmup_requests >= 0")


def simulated_model(s: BenchSettings) -> ModelInHost:
    """The simulated model, in the words the simulator's errors use (``sim.dllm.enabled``)."""
    if not s.sim.dllm.enabled:
        if s.sim.hybrid.enabled:
            return ModelInHost(ModelKind.autoregressive, "sim.hybrid.enabled simulates a hybrid model",
                               "a hybrid model (sim.hybrid.enabled)", "add sim.dllm.enabled=true",
                               hybrid="sim.hybrid")
        return ModelInHost(ModelKind.autoregressive, "the simulator runs an attention-only autoregressive model",
                           "an autoregressive model", "add sim.dllm.enabled=true",
                           to_hybrid="add sim.hybrid.enabled=true")
    # NOTE: the simulator's rounds are algorithm-agnostic (no dllm_algorithm to refuse by)
    return ModelInHost(ModelKind.diffusion, "sim.dllm.enabled simulates a diffusion LM",
                       "a diffusion LM (sim.dllm.enabled)", "add sim.dllm.enabled=true")


def _check_dllm(s: BenchSettings) -> None:
    """One-line errors for a kind the simulated model refuses (``compose.compat``, as the
    server checks them), and for what the dLLM simulator (``sim.dllm.enabled``) does not model."""
    dllm = s.sim.dllm
    if not s.is_live:
        # NOTE: a live replay measures the server's own scheduling; it chooses no policy here
        check_model_fit(simulated_model(s), s.policies)
        check_host_settings(s.policies, "sim.hicache_tokens=N, SGLang's HiCache modelled", s.sim.hicache_tokens > 0)
    policy = s.policies["policy"].needs_of() if "policy" in s.policies and not s.is_live else None
    if not dllm.enabled:
        if dllm.oracle:
            raise ConfigError("sim.dllm.oracle needs sim.dllm.enabled=true and +policy=dwise")
        return
    if s.is_live:
        return  # NOTE: a live replay measures the server's own scheduling; sim.* is not read
    others = [f"+{g}=" for g in s.policies if g != "policy"]
    if others or s.sim.replicas != 1:
        what = ", ".join(others) or f"sim.replicas={s.sim.replicas}"
        raise ConfigError(f"{what} is not simulated with sim.dllm.enabled (SGLang's dLLM rounds: one server, "
                          "no admission gate, adapters or cache policy)")
    if dllm.oracle and (policy is None or policy.sglang_native is not None):
        raise ConfigError("sim.dllm.oracle orders DWISE's rounds by the hidden truth: it needs +policy=dwise")
    if dllm.block_size < 1 or not 0.0 <= dllm.confidence <= 1.0:
        raise ConfigError("sim.dllm.block_size must be >= 1 and sim.dllm.confidence in [0, 1]")
    if dllm.round_base_s < 0 or dllm.round_block_s < 0 or dllm.round_base_s + dllm.round_block_s <= 0:
        raise ConfigError("sim.dllm.round_base_s and round_block_s must be >= 0, with a positive sum")
    if dllm.max_new_tokens is not None and dllm.max_new_tokens < 1:
        raise ConfigError(f"sim.dllm.max_new_tokens must be >= 1 or null, got {dllm.max_new_tokens}")
    if s.sim.max_running_requests is not None and s.sim.max_running_requests < 1:
        raise ConfigError("sim.max_running_requests must be >= 1 (the dLLM slots)")
    if DllmRounds(dllm.rounds_per_block) is DllmRounds.table:
        w = dllm.rounds_table
        if not 1 <= len(w) <= dllm.block_size or min(w) < 0 or sum(w) <= 0:
            raise ConfigError(f"sim.dllm.rounds_table needs 1..{dllm.block_size} weights >= 0 (of 2.."
                              f"{dllm.block_size + 1} rounds per block) with a positive sum, got {list(w)}")
