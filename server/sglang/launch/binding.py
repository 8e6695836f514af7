"""The server binding contract: what one kind states and installs in SGLang.

Each kind's binding (``compose.kinds.Kind.server_binding``, a module under its
seam: ``server/sglang/<seam>/…binding.py``) is one object with three parts:

* ``launch`` (the launcher, before the model exists): the SGLang ``ServerArgs``
  fields the option's needs imply, and the combinations it refuses, naming the
  field (``LaunchFields.require`` refuses a user's conflicting value);
* ``install`` (every SGLang process that runs the scheduler, from the plugin):
  the hooks, registry entries and scheduler parts the option needs;
* ``extend_cli`` (wherever SGLang's argument parser is built): names the kind
  adds to SGLang's CLI choices (e.g. ``--radix-eviction-policy switchboard``).

The argument builder (``args.py``) and the plugin (``plugin.py``) loop over the
chosen kinds and call these; neither names a kind. Binding modules import
SGLang only inside ``install`` (the launcher imports them to build the argv).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from compose.config import ConfigError
from compose.kinds import Kind, kinds, load_binding, register_kind
from server.sglang.launch.symbols import HookedSymbol

if TYPE_CHECKING:
    from compose.specs import PolicySpec
    from policies.scheduling import SchedulingPolicy
    from server.resolve import LaunchPlan


@dataclass
class LaunchFields:
    """The ``ServerArgs`` fields being built for one plan (user's ``sglang.*`` first)."""

    plan: LaunchPlan
    """The plan being launched."""
    fields: dict[str, Any]
    """ServerArgs fields so far (mutated by ``require`` and by bindings)."""

    def require(self, name: str, value: Any, why: str) -> None:
        """Set ``name`` to ``value``; a user's other value is a ``ConfigError`` naming both."""
        if name in self.fields and self.fields[name] not in (None, value):
            raise ConfigError(f"sglang.{name}={self.fields[name]} conflicts with {why} (needs {value})")
        self.fields[name] = value


#: Builds one seam for a freshly initialised SGLang scheduler (``None``: not needed there).
SeamFactory = Callable[[Any], object | None]


@dataclass
class SchedulerParts:
    """What the bindings hand SGLang's scheduler subclass in this process.

    NOTE: filled by ``install`` before ``scheduler_class`` is built; a part no
    chosen kind filled keeps SGLang's behaviour."""

    order: SchedulingPolicy | None = None
    """The prefill queue's order run through ``calc_priority``; ``None``: SGLang's own."""
    policies: list[object] = field(default_factory=list)
    """Every policy object installed here, told of finished requests and ended
    sessions when it has those faces (``policies.feedback``)."""
    seams: list[SeamFactory] = field(default_factory=list)
    """Factories of the scheduler's event subscribers (``scheduling/events.py``), in binding order."""
    installed: list[str] = field(default_factory=list)
    """One ``group=what`` line per installed kind, for the plugin's log line."""


@runtime_checkable
class ServerBinding(Protocol):
    """One kind's binding in the server (see the module docstring)."""

    symbols: tuple[HookedSymbol, ...]
    """Every SGLang symbol its hooks touch beyond the core's (``launch/contract.py``):
    startup checks them in every SGLang process, the kind chosen or not."""

    def launch(self, spec: PolicySpec, launch: LaunchFields) -> None:
        """Set the launch fields ``spec``'s needs imply; raise ``ConfigError`` for a refused combination."""
        ...

    def install(self, spec: PolicySpec, plan: LaunchPlan, parts: SchedulerParts) -> None:
        """Install the option in this SGLang process (the scheduler's module is imported)."""
        ...

    def extend_cli(self) -> None:
        """Add this kind's names to SGLang's CLI choices (idempotent; may import SGLang)."""
        ...


def server_binding(kind: Kind) -> ServerBinding:
    """The kind's server binding object, checked against the contract."""
    binding = load_binding(kind.server_binding)
    if not isinstance(binding, ServerBinding):
        raise TypeError(f"{kind.server_binding} is not a ServerBinding (symbols, launch, install, extend_cli)")
    return binding


def chosen(plan: LaunchPlan) -> list[tuple[PolicySpec, ServerBinding]]:
    """The plan's chosen kinds with their bindings, in the registry's order.

    The kinds the plan carries (``LaunchPlan.kinds``) are registered first.
    NOTE: a group the plan chose but this process still has no kind for (a
    plan without its kinds' data) raises ``ConfigError`` naming it: skipping it
    would serve without the policy the user chose."""
    for data in plan.kinds:
        register_kind(Kind.from_json(data))
    registered = {k.group for k in kinds()}
    unknown = [g for g in plan.policies if g not in registered]
    if unknown:
        raise ConfigError(
            f"+{unknown[0]} was chosen but this process (pid {os.getpid()}) has no kind '{unknown[0]}' registered: "
            "the plan carries no such kind (LaunchPlan.kinds; register_kind it before the plan is made)")
    return [(plan.policies[k.group], server_binding(k)) for k in kinds() if k.group in plan.policies]
