"""Chosen policies as plain data, validated and instantiated in one place.

A ``PolicySpec`` is what crosses process boundaries (JSON): the config group,
the ``_target_`` class path and its parameters. ``build_policy`` is the only
way a spec becomes an object: in the launcher (to validate at startup), in
every SGLang process (through the plugin) and in the simulator.
"""

from __future__ import annotations

import importlib
import inspect
import typing
from dataclasses import dataclass, field
from typing import Any, Mapping

import pydantic
from omegaconf import DictConfig, OmegaConf

from policies import KINDS, Kind
from server.config import ConfigError

_KIND_BY_GROUP: dict[str, Kind] = {k.group: k for k in KINDS}


@dataclass(frozen=True)
class PolicySpec:
    """One chosen policy: ``cfg.<group>`` with ``_target_`` split off."""

    group: str
    """Config group (``policy``, ``cache``, ``admission``)."""
    target: str
    """Dotted path of the policy class (``policies.<kind>.<option>.<Class>``)."""
    params: dict[str, Any] = field(default_factory=dict)
    """Constructor arguments."""

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "target": self.target, "params": dict(self.params)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "PolicySpec":
        return cls(data["group"], data["target"], dict(data.get("params", {})))


def specs_from_config(cfg: DictConfig) -> dict[str, PolicySpec]:
    """Validated specs of the kinds chosen in ``cfg`` (absent kinds: none)."""
    specs: dict[str, PolicySpec] = {}
    for kind in KINDS:
        node = cfg.get(kind.group)
        if node is None:
            continue
        data = OmegaConf.to_container(node, resolve=True)
        if not isinstance(data, dict) or "_target_" not in data:
            raise ConfigError(f"'{kind.group}' must name a class with _target_")
        target = str(data.pop("_target_"))
        spec = PolicySpec(kind.group, target, data)
        build_policy(spec)  # NOTE: validates types and the Protocol at startup
        specs[kind.group] = spec
    return specs


def policy_class(spec: PolicySpec) -> type:
    """Import the class a spec names, checking it belongs to its kind."""
    kind = _KIND_BY_GROUP.get(spec.group)
    if kind is None:
        raise ConfigError(f"unknown policy group '{spec.group}'")
    module_name, _, cls_name = spec.target.rpartition(".")
    if not module_name.startswith(f"policies.{kind.package}."):
        raise ConfigError(
            f"{spec.group}._target_: {spec.target} is not a policies.{kind.package} class"
        )
    try:
        return getattr(importlib.import_module(module_name), cls_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{spec.group}._target_: cannot import {spec.target}: {exc}") from exc


def build_policy(spec: PolicySpec) -> Any:
    """Instantiate a spec; every mistake is a ``ConfigError`` naming the field."""
    cls = policy_class(spec)
    params = _validated_params(spec, cls)
    try:
        obj = cls(**params)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{spec.group}: {exc}") from exc
    kind = _KIND_BY_GROUP[spec.group]
    protocol = getattr(importlib.import_module(f"policies.{kind.package}"), kind.protocol)
    if not isinstance(obj, protocol):
        raise ConfigError(f"{spec.group}: {spec.target} does not implement {kind.protocol}")
    return obj


def _validated_params(spec: PolicySpec, cls: type) -> dict[str, Any]:
    sig = inspect.signature(cls)
    hints = typing.get_type_hints(cls.__init__) if cls.__init__ is not object.__init__ else {}
    out: dict[str, Any] = {}
    for name, value in spec.params.items():
        if name not in sig.parameters:
            valid = ", ".join(sig.parameters) or "none"
            raise ConfigError(
                f"unknown config key '{spec.group}.{name}' "
                f"({cls.__name__} parameters: {valid})"
            )
        hint = hints.get(name, Any)
        try:
            out[name] = pydantic.TypeAdapter(hint).validate_python(value, strict=False)
        except pydantic.ValidationError as exc:
            msg = exc.errors()[0]["msg"]
            raise ConfigError(f"invalid value for '{spec.group}.{name}': {msg} (got {value!r})") from None
    return out


def describe_policies(policies: Mapping[str, PolicySpec]) -> list[str]:
    """One log line per policy kind: the chosen class and parameters, or SGLang's built-in."""
    lines = []
    for kind in KINDS:
        spec = policies.get(kind.group)
        what = f"{spec.target} {spec.params or ''}".strip() if spec else "sglang built-in"
        lines.append(f"{kind.group:<9} ({kind.package}): {what}")
    return lines
