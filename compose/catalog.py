"""What a root config reads, as its ``--help`` and the README describe it.

``groups("config")`` (the server) and ``groups("bench")`` (the simulator) list
the config groups ``conf/<root>.yaml`` reads, each option with a one-line
description taken from the code or the YAML it names, so that no line can
drift from ``conf/``:

* every policy kind (``compose.kinds``; both hosts read all of them), chosen as
  ``+<group>=<option>``: the kind's line is its contract module's docstring,
  each option's line its ``_target_`` class's docstring (the first sentence of
  its first paragraph; where that defers to the module docs, the module's),
  and an option whose ``needs`` make the server run SGLang's (or SMG's) own
  implementation is marked so;
* the other groups of the root's defaults list (``model`` for the server;
  ``trace``, ``accelerator``, ``model_profile`` for the simulator), each option
  described by its YAML file's leading comment, the default marked;
* the typed settings nodes (``_schema/<name>@<key>``), by their dataclass's docstring.

Groups the root config does not read (the simulator's, for the server) and the
internal ``_schema`` group are never listed. ``compose.help`` renders this.

NOTE: importing this module is light: policy modules are imported only when
``groups`` runs, SGLang and torch never (``tests/config/test_help.py``).
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from compose.config import CONF_DIR, group_options
from compose.kinds import Kind, kinds
from compose.schema import register_schemas


@dataclass(frozen=True)
class Option:
    """One option of a config group, as ``--help`` and the README show it."""

    name: str
    """The option (``conf/<group>/<name>.yaml``)."""
    text: str
    """One-line description (a docstring's or the YAML comment's first sentence)."""
    builtin: str | None = None
    """Where the host runs SGLang's or SMG's own implementation: which (``None``: Switchboard's)."""
    default: bool = False
    """The root config's default for a group in its defaults list."""
    params: tuple[str, ...] = ()
    """A policy option's parameters (``<group>.<parameter>=value``), in its YAML's order;
    host settings (``Group.host_settings``) are not among them."""


@dataclass(frozen=True)
class Group:
    """One config group the root config reads."""

    name: str
    """Config group (``conf/<name>/``)."""
    text: str
    """What the group chooses."""
    options: tuple[Option, ...]
    """Every option in ``conf/<name>/``, sorted."""
    kind: bool
    """A policy kind: chosen with a leading ``+``, absent by default."""
    host_settings: tuple[str, ...] = ()
    """A kind's host settings (``compose.kinds.Kind.host_settings``): the deployment's fields
    under the same group, read whichever option is chosen."""

    @property
    def flag(self) -> str:
        """How the command line chooses an option: ``+policy=`` or ``model=``."""
        return f"+{self.name}=" if self.kind else f"{self.name}="


def summary(doc: str | None) -> str:
    """The first sentence of ``doc``'s first paragraph on one line, ````code```` as ```code```."""
    text = " ".join(inspect.cleandoc(doc or "").split("\n\n")[0].split())
    depth = 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "." and depth <= 0 and (i + 1 == len(text) or text[i + 1] == " "):
            text = text[: i + 1]
            break
    return text.replace("``", "`")


def _module_summary(module: str) -> str:
    """A module docstring's summary without its ```+group=option`:`` lead."""
    text = re.sub(r"^`[^`]*`:\s*", "", summary(importlib.import_module(module).__doc__))
    return text[:1].upper() + text[1:]


def class_summary(cls: type) -> str:
    """``cls``'s docstring summary; the module's where the class defers to its module docs."""
    text = summary(cls.__doc__)
    return _module_summary(cls.__module__) if "module docs" in text or not text else text


def _needs(cls: type) -> Any:
    """A policy class's ``needs``: the class attribute, or a default instance's.

    NOTE: a policy whose needs depend on its parameters sets them in
    ``__init__``; policies are pure objects, so a default instance is cheap."""
    needs = inspect.getattr_static(cls, "needs", None)
    if is_dataclass(needs) and not isinstance(needs, type):
        return needs
    try:
        return cls().needs
    except Exception:  # NOTE: help never fails on an option that needs arguments
        return None


def builtin_of(needs: Any) -> str | None:
    """Which of SGLang's (or its gateway SMG's) own implementations the host runs
    for a policy with these ``needs`` instead of the policy object (``None``: the object)."""
    native = getattr(needs, "sglang_native", None)
    if native:
        return f"SGLang's own --schedule-policy {native}"
    gateway = getattr(needs, "gateway_policy", None)
    if gateway:
        return f"SMG's own --policy {gateway}, live"
    strategy = getattr(needs, "sglang_strategy", None)
    if strategy:
        return f"SGLang's own {strategy} eviction, as a policy"
    if getattr(needs, "mixed_methods", None) is False:
        return "SGLang's own LoRA path"
    return None


def _load_mapping(path: Path) -> DictConfig:
    """The YAML file ``path``, which must be a mapping (every file under ``conf/`` is one)."""
    node = OmegaConf.load(path)
    if not isinstance(node, DictConfig):
        raise TypeError(f"{path} is a YAML list, not a mapping")
    return node


def _policy_option(group: str, option: str, host: tuple[str, ...]) -> Option:
    """``conf/<group>/<option>.yaml``'s line: its ``_target_`` class's docstring summary,
    and its parameters (the YAML's keys but ``_target_`` and the ``host`` settings)."""
    try:
        node = _load_mapping(CONF_DIR / group / f"{option}.yaml")
        module, _, name = str(node["_target_"]).rpartition(".")
        cls = getattr(importlib.import_module(module), name)
    except Exception as exc:  # NOTE: --help never fails on one broken option; it says why instead
        return Option(option, f"(cannot be described: {type(exc).__name__}: {exc})")
    params = tuple(str(k) for k in node if not str(k).startswith("_") and str(k) not in host)
    return Option(option, class_summary(cls), builtin_of(_needs(cls)), params=params)


def yaml_summary(group: str, option: str) -> str:
    """The first sentence of ``conf/<group>/<option>.yaml``'s leading comment."""
    lines = []
    for line in (CONF_DIR / group / f"{option}.yaml").read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:].strip())
    return summary("\n".join(lines))


def root_defaults(config_name: str) -> list[Any]:
    """The defaults list of ``conf/<config_name>.yaml``, as written."""
    return list(_load_mapping(CONF_DIR / f"{config_name}.yaml").get("defaults", []))


def _plain_groups(config_name: str) -> dict[str, str]:
    """The defaults list's ``<group>: <option>`` entries (neither ``hydra/`` nor ``_self_``)."""
    out: dict[str, str] = {}
    for entry in root_defaults(config_name):
        if isinstance(entry, DictConfig):
            for key, value in entry.items():
                if not str(key).startswith(("override ", "hydra", "_")):
                    out[str(key)] = str(value)
    return out


def schema_nodes(config_name: str) -> dict[str, str]:
    """``{key: schema name}`` of the defaults list's ``_schema/<name>@<key>`` entries."""
    out: dict[str, str] = {}
    for entry in root_defaults(config_name):
        if isinstance(entry, str) and entry.startswith("_schema/") and "@" in entry:
            name, _, key = entry.removeprefix("_schema/").partition("@")
            out[key] = name
    return out


def schema_summary(name: str) -> str | None:
    """The docstring summary of the dataclass stored as ``_schema/<name>`` (``None``: none,
    or not registered: the entry point registers its schemas before Hydra runs)."""
    from hydra.core.config_store import ConfigStore

    try:
        node = ConfigStore.instance().load(f"_schema/{name}.yaml").node
    except Exception:  # NOTE: ConfigLoadError when the schemas were not registered here
        return None
    cls = node._metadata.object_type if isinstance(node, DictConfig) else None
    return summary(cls.__doc__) if isinstance(cls, type) and cls is not dict else None


def _kind_group(kind: Kind) -> Group:
    host = tuple(f.name for f in fields(kind.host_settings)) if kind.host_settings is not None else ()
    options = tuple(_policy_option(kind.group, o, host) for o in group_options(kind.group))
    return Group(kind.group, _module_summary(kind.protocol_class().__module__), options, kind=True,
                 host_settings=host)


def groups(config_name: str, include_kinds: bool = True) -> list[Group]:
    """What ``conf/<config_name>.yaml`` reads: the policy kinds (when ``include_kinds``),
    then its defaults list's groups."""
    register_schemas()  # NOTE: the server's (idempotent); the simulator's entry point registers its own
    out = [_kind_group(k) for k in kinds() if group_options(k.group)] if include_kinds else []
    schemas = schema_nodes(config_name)
    for name, default in _plain_groups(config_name).items():
        text = (schema_summary(schemas[name]) if name in schemas else None) or f"`conf/{name}/`."
        options = tuple(Option(o, yaml_summary(name, o), default=o == default) for o in group_options(name))
        out.append(Group(name, text, options, kind=False))
    return out
