"""``resolve(cfg) -> LaunchPlan``: every derived value, computed once, logged once."""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

from compose.config import ConfigError
from compose.kinds import is_builtin, kind_of
from compose.schema import Device, DType, SourceKind
from compose.specs import PolicySpec, describe_policies, specs_from_config

log = logging.getLogger("switchboard")

#: ServerArgs fields that Switchboard sets from its own config sections.
OWNED_SGLANG_FIELDS: dict[str, str] = {
    "model_path": "model.path",
    "served_model_name": "model.name",
    "dtype": "model.dtype",
    "dllm_algorithm": "model.dllm_algorithm",
    "host": "server.host",
    "port": "server.port",
    "device": "server.device",
    "log_level": "server.log_level",
}

#: ServerArgs fields holding a secret, and where the key is given instead.
#: NOTE: never a literal in the config: a command line is visible to every local
#: user, and the plan is written to a file (``server.auth``).
SECRET_SGLANG_FIELDS: dict[str, str] = {
    "api_key": "server.api_key_file (or $SWITCHBOARD_API_KEY)",
    "admin_api_key": "server.admin_api_key_file (or $SWITCHBOARD_ADMIN_API_KEY)",
}


@dataclass(frozen=True)
class LaunchPlan:
    """Everything the SGLang launcher needs, as plain data (JSON-serializable)."""

    device: str
    """``cpu`` or ``cuda`` (``auto`` resolved)."""
    model_path: str | None
    """Checkpoint directory; ``None`` until the default model is materialized."""
    sglang: dict[str, Any]
    """ServerArgs fields (user's ``sglang.*`` over Switchboard's)."""
    policies: dict[str, PolicySpec] = field(default_factory=dict)
    """Chosen policy kinds by config group; absent kinds keep SGLang's behaviour."""
    cpu_threads: int = 1
    """OpenMP threads on CPU."""
    shutdown_grace_s: float = 10.0
    """Seconds SGLang gets to exit on Ctrl-C/SIGTERM before it is killed."""
    default_model: dict[str, Any] | None = None
    """``model.source`` (enums as their strings) when ``model_path`` is to be built from it."""
    feedback_log: str | None = None
    """``server.feedback_log``, made absolute."""
    device_defaults: dict[str, Any] = field(default_factory=dict)
    """ServerArgs defaults of this device (``server.cpu_sglang`` on CPU): applied
    under the user's ``sglang.*`` and under the flags a chosen option forces
    (``launch/args.py``), so a default never conflicts with an option's need."""
    kinds: list[dict[str, Any]] = field(default_factory=list)
    """The chosen kinds registered outside Switchboard (``register_kind``), as
    ``Kind.to_json`` data. NOTE: every process that reads the plan registers them
    before it looks up a binding (``launch.binding.chosen``), so a kind registered
    in the launching process is known in SGLang's scheduler processes too."""

    @property
    def is_diffusion(self) -> bool:
        """Whether the served model is a diffusion LM (``model.dllm_algorithm``
        is set): SGLang then runs it in denoising block rounds (its dLLM path),
        not token by token.

        NOTE: ``sglang.dllm_algorithm`` is owned (``OWNED_SGLANG_FIELDS``), so
        ``model.dllm_algorithm`` is its only source."""
        return self.sglang.get("dllm_algorithm") is not None

    def with_model_path(self, path: str) -> LaunchPlan:
        return dataclasses.replace(self, model_path=path, sglang=dict(self.sglang, model_path=path),
                                   default_model=None)

    def to_json(self) -> str:
        data = dict(self.__dict__)
        data["policies"] = {g: s.to_json() for g, s in self.policies.items()}
        return json.dumps(data, indent=1, default=str)

    @classmethod
    def from_json(cls, text: str) -> LaunchPlan:
        data = json.loads(text)
        data["policies"] = {g: PolicySpec.from_json(s) for g, s in data["policies"].items()}
        return cls(**data)


def detect_device(requested: Device) -> str:
    """``cuda`` when requested or (``auto``) when torch sees a GPU, else ``cpu``."""
    if requested is Device.cpu:
        return "cpu"
    import torch

    has_cuda = torch.cuda.is_available()
    if requested is Device.cuda and not has_cuda:
        raise ConfigError("server.device=cuda but torch sees no CUDA device")
    return "cuda" if has_cuda else "cpu"


def resolve(cfg: DictConfig) -> LaunchPlan:
    """Turn a composed config into a ``LaunchPlan`` (raises ``ConfigError``)."""
    user_sglang = OmegaConf.to_container(cfg.sglang, resolve=True)
    assert isinstance(user_sglang, dict)
    for key in user_sglang:
        if key in SECRET_SGLANG_FIELDS:
            raise ConfigError(f"sglang.{key} would put a key on the command line, where every local user "
                              f"reads it: set {SECRET_SGLANG_FIELDS[key]}")
        if key in OWNED_SGLANG_FIELDS:
            raise ConfigError(
                f"set {OWNED_SGLANG_FIELDS[key]} instead of sglang.{key} "
                f"(Switchboard owns that ServerArgs field)"
            )
    if cfg.server.cpu_threads < 1:
        raise ConfigError(f"server.cpu_threads must be >= 1, got {cfg.server.cpu_threads}")
    policies = specs_from_config(cfg)
    device = detect_device(Device(cfg.server.device))

    # NOTE: OmegaConf types a container's keys as any DictKeyType; a config section's keys are str.
    device_defaults = cast("dict[str, Any]", OmegaConf.to_container(cfg.server.cpu_sglang, resolve=True)) \
        if device == "cpu" else {}
    if cfg.model.dllm_algorithm is not None:
        # NOTE: the CPU cap on running requests was measured on the autoregressive default
        # model (bench/results/cpu_defaults.md); SGLang sizes a diffusion LM's block slots
        # from it, so there its own sizing stays.
        device_defaults.pop("max_running_requests", None)
    sglang: dict[str, Any] = dict(cast("dict[str, Any]", user_sglang))
    model_path = cfg.model.path
    if model_path is not None:
        path = Path(model_path).expanduser()
        if not (path / "config.json").is_file():
            raise ConfigError(f"model.path={model_path} is not a checkpoint directory (no config.json)")
        model_path = str(path.resolve())
    sglang.update(
        model_path=model_path,
        served_model_name=cfg.model.name,
        dtype=DType(cfg.model.dtype).value,
        dllm_algorithm=cfg.model.dllm_algorithm,
        host=cfg.server.host,
        port=int(cfg.server.port),
        device=device,
        log_level=cfg.server.log_level,
    )
    source = None if model_path else cast(  # NOTE: str keys, as above
        "dict[str, Any]", OmegaConf.to_container(cfg.model.source, resolve=True, enum_to_str=True))
    if source is not None and cfg.model.source.kind == SourceKind.random_sdar and cfg.model.dllm_algorithm is None:
        raise ConfigError("model.source.kind=random_sdar builds a diffusion LM: set model.dllm_algorithm "
                          "(e.g. LowConfidence)")
    return LaunchPlan(
        device=device,
        model_path=model_path,
        sglang=sglang,
        device_defaults=device_defaults,
        policies=policies,
        cpu_threads=int(cfg.server.cpu_threads),
        shutdown_grace_s=float(cfg.server.shutdown_grace_s),
        default_model=source,
        feedback_log=str(Path(cfg.server.feedback_log).expanduser().resolve()) if cfg.server.feedback_log else None,
        kinds=[k.to_json() for g in policies if not is_builtin(g) and (k := kind_of(g)) is not None],
    )


def describe(plan: LaunchPlan) -> list[str]:
    """One log line per policy kind (chosen option or SGLang built-in)."""
    return describe_policies(plan.policies)
