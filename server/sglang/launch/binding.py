"""The server binding contract: what one kind states and installs in SGLang.

Each kind's binding (``compose.kinds.Kind.server_binding``, a module under its
seam: ``server/sglang/<seam>/…binding.py``) is one object with three parts:

* ``launch`` (the launcher, before the model exists): the combinations the
  option refuses, naming the field, and the SGLang ``ServerArgs`` fields its
  needs force, returned as data (``ForcedFlag``, each with its reason). The
  argument builder sets them (a user's conflicting value is refused naming
  both), the startup log prints them per option, and a live comparison runs
  stock SGLang with the ones that change how stock serves (``controls``);
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from compose.config import ConfigError
from compose.kinds import Kind, kinds, load_binding, register_kind
from server.sglang.launch.symbols import HookedSymbol

if TYPE_CHECKING:
    from compose.specs import PolicySpec
    from policies.scheduling import SchedulingPolicy
    from server.resolve import LaunchPlan


@dataclass(frozen=True)
class ForcedFlag:
    """One SGLang ``ServerArgs`` field an option's needs force, and why."""

    field: str
    """The ``ServerArgs`` field (``sglang.<field>`` in the config)."""
    value: Any
    """The value the option needs."""
    why: str
    """Why the option needs it, without the option's name (printed at startup, in a
    refusal, and in the README's options table)."""
    control: bool = True
    """True: the flag changes how stock SGLang serves (the overlap scheduler, the
    page size, a backend), so a live comparison also runs stock with it (the
    control row) and credits the option only with what it adds beyond that.
    False: the flag only carries the option itself into SGLang (its cache
    backend, its adapters, its draft algorithm, a built-in it names)."""

    def override(self) -> str:
        """The flag as a config override, ``sglang.<field>=<value>``."""
        value = str(self.value).lower() if isinstance(self.value, bool) else self.value
        return f"sglang.{self.field}={value}"


@dataclass(frozen=True)
class Forced:
    """A ``ForcedFlag`` with the option that forces it."""

    option: str
    """``<group>=<option>``, as chosen."""
    flag: ForcedFlag

    def line(self) -> str:
        """The startup log's line."""
        mark = "" if self.flag.control else " [the option itself]"
        return f"{self.option} forces {self.flag.override()}: {self.flag.why}{mark}"


@dataclass
class LaunchFields:
    """The ``ServerArgs`` fields being built for one plan (user's ``sglang.*`` first).

    NOTE: bindings read ``fields`` and return what they force; only ``apply``
    writes, so every field an option sets is in ``forced``."""

    plan: LaunchPlan
    """The plan being launched."""
    _fields: dict[str, Any]
    forced: list[Forced] = field(default_factory=list)
    """Every flag the chosen options forced, in binding order."""

    @property
    def fields(self) -> Mapping[str, Any]:
        """The ServerArgs fields so far (read-only to bindings)."""
        return MappingProxyType(self._fields)

    def apply(self, option: str, flags: Sequence[ForcedFlag]) -> None:
        """Set each of ``option``'s flags; a user's (or an earlier option's) other value is a
        ``ConfigError`` naming both."""
        for flag in flags:
            have = self._fields.get(flag.field)
            if have not in (None, flag.value):
                raise ConfigError(f"sglang.{flag.field}={have} conflicts with {option}: {flag.why} "
                                  f"(needs {flag.value})")
            self._fields[flag.field] = flag.value
            self.forced.append(Forced(option, flag))

    def default(self, name: str, value: Any) -> None:
        """Set ``name`` unless set (the device's defaults, which stock gets too: not forced)."""
        self._fields.setdefault(name, value)

    def resolve_auto(self, name: str, value: Any) -> None:
        """The device's value for a field left at SGLang's ``auto`` (an explicit value stays)."""
        if self._fields.get(name) == "auto":
            self._fields[name] = value

    def result(self) -> dict[str, Any]:
        """The fields built (a copy)."""
        return dict(self._fields)


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

    def launch(self, spec: PolicySpec, launch: LaunchFields) -> Sequence[ForcedFlag]:
        """The flags ``spec``'s needs force on this plan; raise ``ConfigError`` for a refused combination."""
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
