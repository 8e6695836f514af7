"""The kinds registry: every policy kind, as the hosts and the config see it.

A kind is one config group (``+<group>=<option>``), one package under
``policies/`` holding its Protocol, its Needs dataclass and its views and
decisions, and optionally a schema of *host settings* that live under the same
group but belong to the deployment, not to the policy (``cache.host_tier_tokens``).
Adding a kind is ``docs/adding-a-kind.md``; ``tests/config/test_kinds.py``
checks that every kind here has all of its parts and a binding in both hosts.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from compose.schema import AdaptersHostConfig, CacheHostConfig, RouterHostConfig


@dataclass(frozen=True)
class Kind:
    """One policy kind: its config group, its package, Protocol and Needs."""

    group: str
    """Config group (``+<group>=<option>``)."""
    package: str
    """Package under ``policies/`` holding the Protocol and the options."""
    protocol: str
    """Name of the Protocol class in that package."""
    needs: str
    """Name of the frozen Needs dataclass in that package (a policy's ``needs``)."""
    host_settings: type | None = None
    """Dataclass of the host settings that share the group (``None``: none)."""

    def protocol_class(self) -> type[Any]:
        """The kind's Protocol class."""
        cls: type[Any] = getattr(importlib.import_module(f"policies.{self.package}"), self.protocol)
        return cls

    def needs_class(self) -> type[Any]:
        """The kind's Needs dataclass."""
        cls: type[Any] = getattr(importlib.import_module(f"policies.{self.package}"), self.needs)
        return cls


#: Every policy kind, in the order hosts apply them.
KINDS: tuple[Kind, ...] = (
    Kind("policy", "scheduling", "SchedulingPolicy", "SchedulingNeeds"),
    Kind("cache", "cache", "EvictionPolicy", "EvictionNeeds", host_settings=CacheHostConfig),
    Kind("admission", "admission", "AdmissionPolicy", "AdmissionNeeds"),
    Kind("adapters", "adapters", "AdaptersPolicy", "AdaptersNeeds", host_settings=AdaptersHostConfig),
    Kind("router", "router", "RouterPolicy", "RouterNeeds", host_settings=RouterHostConfig),
)

#: Kinds by config group.
KIND_BY_GROUP: dict[str, Kind] = {k.group: k for k in KINDS}
