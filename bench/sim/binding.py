"""The simulator binding contract: how one kind attaches its policy to the simulator.

Each kind's binding (``compose.kinds.Kind.sim_binding``, ``module:object``) is
one object with a ``scope`` and an ``attach``. The run (``bench/run.py``)
builds a ``SimParts`` per simulated server (``Scope.replica``: each replica
gets its own policy objects, which keep per-server state) and one for the
gateway in front of them (``Scope.gateway``), by looping over the chosen kinds;
it never names a kind. A part no chosen kind filled keeps stock SGLang's
behaviour (``build_simulator``). Besides the two policy seams every SGLang
server has (the queue order, the eviction order), a kind adds *seams* that
subscribe to the simulator's events (``events.py``), as a server binding's
seams subscribe to the scheduler's; a gateway kind puts a ``Deployment`` on
the gateway's record, which replays the trace over several servers
(``servers.simulate``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from compose.kinds import Kind, kinds, load_binding

if TYPE_CHECKING:
    from bench.config import BenchSettings
    from bench.metrics import RequestRecord, Timeline
    from bench.sim.cache import HostLevels
    from bench.sim.cost import CostModel
    from bench.sim.settings import SimSettings
    from bench.traces.trace import Trace
    from compose.specs import PolicySpec
    from policies.cache import EvictionPolicy
    from policies.feedback import ObservesFinished
    from policies.scheduling import SchedulingOption, SchedulingPolicy


class Scope(StrEnum):
    """Where a kind's policy runs in the simulated deployment."""

    replica = "replica"
    """Inside each simulated SGLang server (one object per replica)."""
    gateway = "gateway"
    """In the gateway in front of the replicas (one object per run)."""


class Deployment(Protocol):
    """Replays a trace over several simulated servers (a gateway kind's, ``SimParts.deployment``)."""

    def __call__(self, settings: BenchSettings, trace: Trace, cost: CostModel, sim_settings: SimSettings,
                 on_final: Callable[[Any], None]) -> tuple[list[RequestRecord], Timeline, dict[str, Any]]:
        """The run's records, timeline and meta (each server built from its own replica record)."""
        ...


@dataclass
class SimParts:
    """The simulator's seams, as the chosen kinds' bindings fill them.

    NOTE: a ``Scope.replica`` record is built once per simulated server and
    handed to ``build_simulator``; a ``Scope.gateway`` record once per run."""

    order: SchedulingPolicy | None = None
    """Queue order (``WaitingQueue``; ``None``: SGLang's own)."""
    rounds: SchedulingOption | None = None
    """A diffusion LM's round order (``bench.sim.dllm``: the option's ``RoundsPolicy``
    face, or a built-in SGLang runs itself; ``None``: SGLang's own)."""
    eviction: EvictionPolicy | None = None
    """Prefix-cache eviction order (``PrefixCache``; ``None``: SGLang's LRU)."""
    host_tier_tokens: int = 0
    """The cache kind's host tier (its host setting ``cache.host_tier_tokens``), handed
    to the cache as the server's binding hands it to the gap cache; 0 = none."""
    snapshot_store_bytes: int = 0
    """The cache kind's snapshot store (its host setting ``cache.snapshot_gb``, an order whose
    needs say ``snapshots``); 0 = none."""
    snapshot_read_tokens: int = 0
    """What one snapshot read is worth in the order's ranking (``cache.snapshot_read_tokens``)."""
    host_levels: HostLevels | None = None
    """A kind's levels below the device (host memory, SSD), bound to the simulator's
    clock and pool when it is built (``cache.HostLevels``); ``None``: none."""
    seams: list[object] = field(default_factory=list)
    """Subscribers of the simulator's events (``events.py``: the arrival gate,
    walk filters, batch hooks, counters), in binding order; one object per
    simulator (they keep its state)."""
    observers: list[ObservesFinished] = field(default_factory=list)
    """Policies told of every finished request, in binding order, after ``order``."""
    deployment: Deployment | None = None
    """The gateway's: the servers the trace is replayed over (``None``: one server)."""
    overlap_off: list[str] = field(default_factory=list)
    """Why SGLang's overlap scheduler is off in this server, one reason per kind that
    forces it (as its server binding forces ``disable_overlap_schedule``; empty: on).
    The run charges it (``overlap.overlap_charged``): the accelerator's
    ``no_overlap_slowdown`` per iteration, and no ``synchronous_forward`` lag."""


@runtime_checkable
class SimBinding(Protocol):
    """One kind's binding in the simulator (see the module docstring)."""

    scope: Scope
    """Which record ``attach`` fills."""
    counters: tuple[str, ...]
    """Names of the counters its seams report (``events.CountsWork``): every run's
    meta holds them, 0 when the kind is not chosen."""

    def attach(self, spec: PolicySpec, settings: BenchSettings, parts: SimParts) -> None:
        """Build ``spec``'s policy (and what it drives) and set it on ``parts``."""
        ...


def sim_binding(kind: Kind) -> SimBinding:
    """The kind's simulator binding object, checked against the contract."""
    binding = load_binding(kind.sim_binding)
    if not isinstance(binding, SimBinding):
        raise TypeError(f"{kind.sim_binding} is not a SimBinding (scope, attach)")
    return binding


def counter_names() -> tuple[str, ...]:
    """Every registered kind's counters (``SimBinding.counters``), in registry order."""
    return tuple(name for kind in kinds() for name in sim_binding(kind).counters)


def sim_parts(settings: BenchSettings, scope: Scope) -> SimParts:
    """A fresh record of ``scope``, filled by the chosen kinds of that scope (registry order)."""
    parts = SimParts()
    for kind in kinds():
        spec = settings.policies.get(kind.group)
        if spec is None:
            continue
        binding = sim_binding(kind)
        if binding.scope is scope:
            binding.attach(spec, settings, parts)
    if scope is Scope.replica and settings.sim.disable_overlap_schedule:
        # NOTE: the user's flag, not a kind's: stock under an option's forced flags (its control row)
        parts.overlap_off.append("sim.disable_overlap_schedule (as sglang.disable_overlap_schedule=true)")
    return parts


__all__ = ["Deployment", "Scope", "SimBinding", "SimParts", "counter_names", "sim_binding", "sim_parts"]
