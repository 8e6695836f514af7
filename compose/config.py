"""Composing the Hydra config and turning every config mistake into one line."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import fields, is_dataclass
from pathlib import Path

from omegaconf import DictConfig
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from compose.schema import moved_key_message, register_schemas

#: The config registry users see: ``conf/<group>/<option>.yaml``.
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
CONFIG_NAME = "config"


class ConfigError(ValueError):
    """A config mistake; its message is one line naming the field or option."""


def compose(overrides: Sequence[str] = (), config_name: str = CONFIG_NAME) -> DictConfig:
    """Compose ``conf/<config_name>.yaml`` (the server's by default) with
    command-line ``overrides``.

    Raises ``ConfigError`` with a one-line message on any mistake.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_schemas()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return hydra_compose(config_name=config_name, overrides=list(overrides))
    except Exception as exc:  # hydra raises many types; all become one line
        raise ConfigError(one_line(exc)) from exc
    finally:
        GlobalHydra.instance().clear()


def group_options(group: str) -> list[str]:
    """The options of ``conf/<group>/`` (what ``+<group>=`` accepts)."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def one_line(exc: BaseException) -> str:
    """A one-line description of a Hydra/OmegaConf composition error."""
    cause = exc if isinstance(exc, OmegaConfBaseException) else exc.__cause__
    full_key: str | None = getattr(cause, "full_key", None)
    if isinstance(cause, OmegaConfBaseException) and full_key:
        key = full_key
        if isinstance(cause, (ConfigKeyError, ConfigAttributeError)):
            moved = moved_key_message(key)
            if moved is not None:
                return moved
            valid = _valid_keys(cause)
            hint = f" (valid keys: {', '.join(valid)})" if valid else ""
            return f"unknown config key '{key}'{hint}"
        detail = str(getattr(cause, "msg", cause)).splitlines()[0]
        return f"invalid value for '{key}': {detail}"
    text = str(exc).split("Config search path")[0]
    missing = re.search(r"Could not find '([^/']+)/([^']+)'", text)
    if missing:
        group, option = missing.groups()
        return (
            f"unknown option '{option}' for +{group}= "
            f"(valid options: {', '.join(group_options(group))})"
        )
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def _valid_keys(cause: OmegaConfBaseException) -> list[str]:
    obj_type = getattr(cause, "object_type", None)
    if obj_type is not None and is_dataclass(obj_type):
        return [f.name for f in fields(obj_type)]
    parent = getattr(cause, "parent_node", None)
    if isinstance(parent, DictConfig):
        return [str(k) for k in parent.keys() if not str(k).startswith("_")]
    return []
