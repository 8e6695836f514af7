"""Chosen policies as plain data, validated and instantiated in one place.

A ``PolicySpec`` is what crosses process boundaries (JSON): the config group,
the ``_target_`` class path, its parameters, the host settings that share
the group (``compose.kinds.Kind.host_settings``) and the policy's needs, read
once when the config is composed. ``build_policy`` is the only way a spec
becomes an object: in the launcher (to validate at startup), in every SGLang
process (through the plugin) and in the simulator. Hosts read a policy's
needs from ``PolicySpec.needs_of``, never by building the policy again.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pydantic
from omegaconf import DictConfig, OmegaConf

from compose.config import ConfigError
from compose.kinds import Kind, kind_of, kinds, load_binding
from compose.schema import moved_key_message


@dataclass(frozen=True)
class PolicySpec:
    """One chosen policy: ``cfg.<group>`` with ``_target_`` split off."""

    group: str
    """Config group (``policy``, ``cache``, ``admission``)."""
    target: str
    """Dotted path of the policy class (``policies.<kind>.<option>.<Class>``)."""
    params: dict[str, Any] = field(default_factory=dict)
    """Constructor arguments."""
    host: dict[str, Any] = field(default_factory=dict)
    """Host settings under the same group (validated by the kind's
    ``host_settings`` dataclass; read them with ``host_settings``)."""
    needs: dict[str, Any] | None = None
    """The policy's needs as plain data (``dataclasses.asdict`` of its Needs), filled in
    by ``with_needs`` when the config is composed; read them with ``needs_of``."""

    def chosen(self) -> dict[str, Any]:
        """What the config chose (group, class, parameters, host settings), as JSON data."""
        return {"group": self.group, "target": self.target, "params": dict(self.params),
                "host": dict(self.host)}

    def to_json(self) -> dict[str, Any]:
        """The whole spec (``chosen`` and the needs), as JSON data (``from_json`` reads it)."""
        return {**self.chosen(), "needs": self.needs}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PolicySpec:
        return cls(data["group"], data["target"], dict(data.get("params", {})),
                   dict(data.get("host", {})), data.get("needs"))

    def with_needs(self) -> PolicySpec:
        """This spec with its policy's needs read (the policy is built once, here)."""
        needs = build_policy(self).needs
        return dataclasses.replace(self, needs=dataclasses.asdict(needs))

    def needs_of(self) -> Any:
        """The policy's Needs dataclass, from the data read at composition.

        NOTE: a spec made without ``with_needs`` (by hand) has none to read:
        that is a host bug, not a config mistake, so it raises ``ValueError``."""
        if self.needs is None:
            raise ValueError(f"{self.group}: spec of {self.target} carries no needs (use with_needs)")
        cls = _kind(self.group).needs_class()
        return pydantic.TypeAdapter(cls).validate_python(self.needs)

    def host_settings(self) -> Any:
        """The kind's host-settings object (``None`` for a kind without any)."""
        cls = _kind(self.group).host_settings
        return None if cls is None else cls(**self.host)


def _kind(group: str) -> Kind:
    """The registered kind of ``group``; ``ConfigError`` naming it when there is none."""
    kind = kind_of(group)
    if kind is None:
        raise ConfigError(f"unknown policy group '{group}'")
    return kind


def specs_from_config(cfg: DictConfig) -> dict[str, PolicySpec]:
    """Validated specs of the kinds chosen in ``cfg`` (absent kinds: none)."""
    specs: dict[str, PolicySpec] = {}
    for kind in kinds():
        node = cfg.get(kind.group)
        if node is None:
            continue
        data = OmegaConf.to_container(node, resolve=True)
        if not isinstance(data, dict) or "_target_" not in data:
            raise ConfigError(f"'{kind.group}' must name a class with _target_")
        # a group's node is a YAML mapping of parameter names: its keys are strings
        params = typing.cast(dict[str, Any], data)
        target = str(params.pop("_target_"))
        spec = PolicySpec(kind.group, target, params, _host_settings(kind.group, kind.host_settings, params))
        # NOTE: building validates types and the Protocol at startup, and reads the needs once
        specs[kind.group] = spec.with_needs()
    return specs


def _host_settings(group: str, schema: type | None, data: dict[str, Any]) -> dict[str, Any]:
    """Take the host settings out of ``data`` (a group's node), validated by
    ``schema``; what stays are the policy's parameters."""
    for key in list(data):
        moved = moved_key_message(f"{group}.{key}")
        if moved is not None:
            raise ConfigError(moved)
    if schema is None:
        return {}
    host = {f.name: data.pop(f.name) for f in dataclasses.fields(schema) if f.name in data}
    hints = typing.get_type_hints(schema)
    for name, value in host.items():
        host[name] = _validated(group, name, hints[name], value)
    try:
        schema(**host)
    except ValueError as exc:
        # NOTE: a schema with several fields starts its message with "<field>: ".
        name, sep, rest = str(exc).partition(": ")
        if not (sep and name in host):
            name, rest = next(iter(host), ""), str(exc)
        raise ConfigError(f"invalid value for '{group}.{name}': {rest}") from None
    return host


def _validated(group: str, name: str, hint: Any, value: Any) -> Any:
    try:
        return pydantic.TypeAdapter(hint).validate_python(value, strict=False)
    except pydantic.ValidationError as exc:
        msg = exc.errors()[0]["msg"]
        raise ConfigError(f"invalid value for '{group}.{name}': {msg} (got {value!r})") from None


def policy_class(spec: PolicySpec) -> type[Any]:
    """Import the class a spec names, checking it belongs to its kind."""
    kind = _kind(spec.group)
    module_name, _, cls_name = spec.target.rpartition(".")
    if not module_name.startswith(f"{kind.contract_module}."):
        raise ConfigError(
            f"{spec.group}._target_: {spec.target} is not a {kind.contract_module} class"
        )
    try:
        cls: type[Any] = getattr(importlib.import_module(module_name), cls_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{spec.group}._target_: cannot import {spec.target}: {exc}") from exc
    return cls


def build_policy(spec: PolicySpec) -> Any:
    """Instantiate a spec; every mistake is a ``ConfigError`` naming the field."""
    cls = policy_class(spec)
    params = _validated_params(spec, cls)
    try:
        obj = cls(**params)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{spec.group}: {exc}") from exc
    kind = _kind(spec.group)
    if not isinstance(obj, kind.protocol_class()):
        raise ConfigError(f"{spec.group}: {spec.target} does not implement {kind.protocol}")
    # NOTE: hosts read a policy's optional needs from here, and only here
    if not isinstance(obj.needs, kind.needs_class()):
        raise ConfigError(f"{spec.group}: {spec.target}.needs is not a {kind.needs}")
    missing = load_binding(kind.faces)(obj) if kind.faces is not None else None
    if missing is not None:
        # NOTE: every host builds through here, so no host calls a face the policy lacks
        raise ConfigError(f"{spec.group}: {spec.target}'s needs promise {missing}, which it does not implement")
    return obj


def _validated_params(spec: PolicySpec, cls: type[Any]) -> dict[str, Any]:
    sig = inspect.signature(cls)
    # NOTE: a dataclass's hints come from the class (each field in the module
    # that declared it, inherited fields included), not from its generated __init__.
    if dataclasses.is_dataclass(cls):
        hints = typing.get_type_hints(cls)
    else:
        hints = typing.get_type_hints(cls.__init__) if cls.__init__ is not object.__init__ else {}
    out: dict[str, Any] = {}
    for name, value in spec.params.items():
        if name not in sig.parameters:
            valid = ", ".join(sig.parameters) or "none"
            raise ConfigError(
                f"unknown config key '{spec.group}.{name}' "
                f"({cls.__name__} parameters: {valid})"
            )
        out[name] = _validated(spec.group, name, hints.get(name, Any), value)
    return out


def describe_policies(policies: Mapping[str, PolicySpec]) -> list[str]:
    """One log line per policy kind: the chosen class and parameters, or SGLang's built-in."""
    lines = []
    for kind in kinds():
        spec = policies.get(kind.group)
        what = " ".join([spec.target] + [str(d) for d in (spec.params, spec.host) if d]) \
            if spec else "sglang built-in"
        lines.append(f"{kind.group:<9} ({kind.package}): {what}")
    return lines
