"""The kinds registry: every policy kind, as the hosts and the config see it.

A kind is one config group (``+<group>=<option>``), one package holding its
Protocol, its Needs dataclass and its views and decisions (``policies/<kind>/``
for Switchboard's own), optionally a schema of *host settings* that live under
the same group but belong to the deployment, not to the policy
(``cache.host_tier_tokens``), and one binding in each host: the server's
(``server/sglang/<seam>/binding.py``: SGLang's launch arguments, refusals and
hooks) and the simulator's (``bench/sim/bindings.py``). The hosts loop over
``kinds()``; none of them names a kind.

Adding a kind is ``docs/adding-a-kind.md``; ``tests/seams/test_kinds.py``
checks that every kind here has all of its parts and a binding in both hosts.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import pkgutil
from dataclasses import dataclass
from typing import Any

from compose.schema import AdaptersHostConfig, CacheHostConfig, RouterHostConfig
from policies.speculative import SpeculativeHostConfig
from policies.tier import TierHostConfig


@dataclass(frozen=True)
class Kind:
    """One policy kind: its config group, its contract and its two bindings."""

    group: str
    """Config group (``+<group>=<option>``)."""
    package: str
    """Package under ``policies/`` holding the Protocol and the options."""
    protocol: str
    """Name of the Protocol class in that package."""
    needs: str
    """Name of the frozen Needs dataclass in that package (a policy's ``needs``)."""
    server_binding: str
    """``module:object`` of the kind's server binding (``server.sglang.launch.binding.ServerBinding``)."""
    sim_binding: str
    """``module:object`` of the kind's simulator binding (``bench.sim.binding.SimBinding``)."""
    host_settings: type | None = None
    """Dataclass of the host settings that share the group (``None``: none)."""
    module: str | None = None
    """Dotted module of the contract when it is not ``policies.<package>`` (a kind kept outside
    Switchboard's tree, e.g. a test's); its options' classes live under it."""
    faces: str | None = None
    """``module:function`` naming what a built policy lacks of the faces its needs promise
    (``str``; ``None``: nothing), for a kind whose Protocol alone cannot say it (the
    scheduling kind: an autoregressive queue, a diffusion LM's rounds, or both);
    ``None``: the Protocol says it all."""

    @property
    def contract_module(self) -> str:
        """Dotted module holding the Protocol and the Needs (options live below it)."""
        return self.module or f"policies.{self.package}"

    def protocol_class(self) -> type[Any]:
        """The kind's Protocol class."""
        cls: type[Any] = getattr(importlib.import_module(self.contract_module), self.protocol)
        return cls

    def needs_class(self) -> type[Any]:
        """The kind's Needs dataclass."""
        cls: type[Any] = getattr(importlib.import_module(self.contract_module), self.needs)
        return cls

    def to_json(self) -> dict[str, Any]:
        """The kind as JSON data (``from_json`` reads it): a plan carries the kinds
        registered outside Switchboard to every process it reaches."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        host = self.host_settings
        data["host_settings"] = None if host is None else f"{host.__module__}:{host.__qualname__}"
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Kind:
        """The kind ``to_json`` wrote (its host settings' class imported by name)."""
        host = data.get("host_settings")
        return cls(**{**data, "host_settings": load_binding(host) if host else None})


def load_binding(target: str) -> Any:
    """The object a ``module:object`` binding path names (imports the module)."""
    return pkgutil.resolve_name(target)


#: Switchboard's own kinds, in the order hosts apply them.
KINDS: tuple[Kind, ...] = (
    Kind("policy", "scheduling", "SchedulingOption", "SchedulingNeeds",
         "server.sglang.scheduling.order_binding:BINDING", "bench.sim.bindings:SCHEDULING",
         faces="policies.scheduling.rounds:missing_face"),
    Kind("cache", "cache", "EvictionPolicy", "EvictionNeeds",
         "server.sglang.cache.binding:BINDING", "bench.sim.bindings:CACHE", host_settings=CacheHostConfig),
    Kind("admission", "admission", "AdmissionPolicy", "AdmissionNeeds",
         "server.sglang.scheduling.admission_binding:BINDING", "bench.sim.bindings:ADMISSION"),
    Kind("adapters", "adapters", "AdaptersPolicy", "AdaptersNeeds",
         "server.sglang.adapters.binding:BINDING", "bench.sim.bindings:ADAPTERS",
         host_settings=AdaptersHostConfig),
    Kind("router", "router", "RouterPolicy", "RouterNeeds",
         "server.cluster.binding:BINDING", "bench.sim.cluster_run:BINDING", host_settings=RouterHostConfig),
    Kind("speculative", "speculative", "SpeculationPolicy", "SpeculativeNeeds",
         "server.sglang.speculative.binding:BINDING", "bench.sim.speculative:BINDING",
         host_settings=SpeculativeHostConfig),
    Kind("decisions", "decisions", "DecisionsPolicy", "DecisionsNeeds",
         "server.sglang.decisions.binding:BINDING", "bench.sim.decisions:BINDING"),
    Kind("tier", "tier", "TierPolicy", "TierNeeds",
         "server.sglang.hicache.binding:BINDING", "bench.sim.tiers:BINDING", host_settings=TierHostConfig),
)

#: Every registered kind by config group, in the order hosts apply them
#: (Switchboard's own, then those added with ``register_kind``).
KIND_BY_GROUP: dict[str, Kind] = {k.group: k for k in KINDS}


#: The entry-point group in which an installed distribution declares its kinds
#: (``<group> = "<module>:<Kind object>"``, e.g. in its ``pyproject.toml``).
ENTRY_POINT_GROUP = "switchboard.kinds"
_discovered = False


def discover_kinds() -> None:
    """Register every kind an installed distribution declares (``ENTRY_POINT_GROUP``).

    NOTE: ``kinds()`` and ``kind_of()`` call it once per process, so every process
    (the CLI, the launcher, each SGLang process) finds the same kinds on its own;
    calling it again re-scans (a kind declared twice must be the same kind)."""
    global _discovered
    _discovered = True
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        kind = entry.load()
        if not isinstance(kind, Kind) or kind.group != entry.name:
            raise TypeError(f"entry point {entry.name} = {entry.value} ({ENTRY_POINT_GROUP}) "
                            f"is not the Kind of group '{entry.name}'")
        register_kind(kind)


def kinds() -> tuple[Kind, ...]:
    """Every registered kind, in the order hosts apply them."""
    if not _discovered:
        discover_kinds()
    return tuple(KIND_BY_GROUP.values())


def kind_of(group: str) -> Kind | None:
    """The registered kind of config group ``group`` (``None``: none)."""
    if not _discovered:
        discover_kinds()
    return KIND_BY_GROUP.get(group)


def register_kind(kind: Kind) -> None:
    """Add ``kind`` to the registry (the public call a kind outside ``compose/`` uses).

    NOTE: registration is per process. A distribution declares its kinds as
    entry points (``discover_kinds``), which every process finds; a kind
    registered here by hand reaches SGLang's processes through the plan
    (``LaunchPlan.kinds``). A kind registered twice must be the same kind."""
    known = KIND_BY_GROUP.get(kind.group)
    if known is not None and known != kind:
        raise ValueError(f"kind group '{kind.group}' is already registered ({known.package})")
    KIND_BY_GROUP[kind.group] = kind


def is_builtin(group: str) -> bool:
    """Whether ``group`` is one of Switchboard's own kinds (``KINDS``)."""
    return any(k.group == group for k in KINDS)


def unregister_kind(group: str) -> None:
    """Remove a kind added with ``register_kind`` (Switchboard's own stay)."""
    if is_builtin(group):
        raise ValueError(f"'{group}' is one of Switchboard's own kinds")
    KIND_BY_GROUP.pop(group, None)
