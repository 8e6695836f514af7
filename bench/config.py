"""Composing ``conf/bench.yaml`` and turning it into typed run settings.

The bench shares ``conf/`` with the server: the policy groups (``+policy=``,
``+cache=``, ``+admission=``) are the server's own and become objects through
``server.policy_spec`` exactly as in the server; the bench's own groups
(``trace``, ``accelerator``, ``model_profile``) are typed by ``bench.schema``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from omegaconf import DictConfig, OmegaConf

from bench.schema import (AcceleratorConfig, MetricsConfig, ModelProfileConfig, OutputConfig,
                          SimConfig, TraceConfig, register_bench_schemas)
from bench.traces.paths import resolve_data_root
from server.config import CONF_DIR, ConfigError, one_line
from server.policy_spec import PolicySpec, build_policy, specs_from_config

#: The bench's root config in ``conf/``.
BENCH_CONFIG_NAME = "bench"
#: Bench groups with a default option (overridden as ``trace=...``, no ``+``).
DEFAULT_GROUPS = ("trace", "accelerator", "model_profile")


def compose_bench(overrides: Sequence[str] = ()) -> DictConfig:
    """Compose ``conf/bench.yaml`` with ``overrides``; mistakes raise a
    one-line ``ConfigError`` naming the field or option."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_bench_schemas()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return hydra_compose(config_name=BENCH_CONFIG_NAME, overrides=list(overrides))
    except Exception as exc:  # hydra raises many types; all become one line
        message = one_line(exc)
        for group in DEFAULT_GROUPS:  # NOTE: chosen without `+`: they have defaults
            message = message.replace(f"+{group}=", f"{group}=")
        raise ConfigError(message) from exc
    finally:
        GlobalHydra.instance().clear()


@dataclass(frozen=True)
class BenchSettings:
    """A composed bench config as typed objects and built policies."""

    trace: TraceConfig
    accelerator: AcceleratorConfig
    model_profile: ModelProfileConfig
    sim: SimConfig
    metrics: MetricsConfig
    output: OutputConfig
    data_root: Path
    policies: dict[str, PolicySpec]
    """Chosen policy kinds by group; absent kinds behave as stock SGLang."""

    def build(self, group: str) -> Optional[Any]:
        """The policy object chosen for ``group``, or None."""
        spec = self.policies.get(group)
        return build_policy(spec) if spec is not None else None

    def describe(self) -> list[str]:
        """One line per policy kind: the chosen class or SGLang's built-in."""
        from policies import KINDS

        lines = []
        for kind in KINDS:
            spec = self.policies.get(kind.group)
            what = f"{spec.target} {spec.params or ''}".strip() if spec else "sglang built-in"
            lines.append(f"{kind.group:<9} ({kind.package}): {what}")
        return lines


def _typed(node: DictConfig, cls: type) -> Any:
    obj = OmegaConf.to_object(node)
    if not isinstance(obj, cls):
        raise ConfigError(f"config node is not a {cls.__name__}")
    return obj


def resolve_bench(cfg: DictConfig) -> BenchSettings:
    """Typed settings of a composed bench config (raises ``ConfigError``)."""
    try:
        return BenchSettings(
            trace=_typed(cfg.trace, TraceConfig),
            accelerator=_typed(cfg.accelerator, AcceleratorConfig),
            model_profile=_typed(cfg.model_profile, ModelProfileConfig),
            sim=_typed(cfg.sim, SimConfig),
            metrics=_typed(cfg.metrics, MetricsConfig),
            output=_typed(cfg.output, OutputConfig),
            data_root=resolve_data_root(cfg.get("data_root")),
            policies=specs_from_config(cfg),
        )
    except ConfigError:
        raise
    except Exception as exc:  # a MISSING value surfaces here, named by OmegaConf
        raise ConfigError(one_line(exc)) from exc
