"""``resolve_cluster(cfg, plan) -> ClusterPlan | None``: replicas, ports, CPUs, gateway.

NOTE: every mistake here is a ``ConfigError`` naming the field, raised before
any process starts or any model is built.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Iterable
from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf

from compose.config import ConfigError, group_options
from compose.schema import ClusterConfig, Discovery
from server.cluster.gateway import GatewayPlan, gateway_plan, selector_terms
from server.ports import PortUse
from server.resolve import LaunchPlan


@dataclass(frozen=True)
class ClusterPlan:
    """The processes of one unit: the workers (if any) and the gateway."""

    gateway: GatewayPlan
    """The SMG gateway in front."""
    workers: tuple[LaunchPlan, ...]
    """One launch plan per worker this command starts (empty with discovery)."""
    cpu_sets: tuple[tuple[int, ...], ...]
    """CPUs each worker is pinned to (empty tuples: not pinned; GPU runs)."""
    max_restarts: int
    """Worker restarts allowed in all before the unit fails."""
    ports: tuple[PortUse, ...] = ()
    """Every port the unit listens on (the gateway's, then each worker's), with its setting."""

    def with_model_path(self, path: str) -> ClusterPlan:
        return dataclasses.replace(self, workers=tuple(w.with_model_path(path) for w in self.workers))


def _cluster_config(cfg: DictConfig) -> ClusterConfig:
    data = OmegaConf.to_object(cfg.cluster)
    assert isinstance(data, ClusterConfig)
    return data


def _check(cluster: ClusterConfig, routed: bool) -> None:
    if cluster.replicas < 1:
        raise ConfigError(f"invalid value for 'cluster.replicas': must be >= 1, got {cluster.replicas}")
    if cluster.max_restarts < 0:
        raise ConfigError(f"invalid value for 'cluster.max_restarts': must be >= 0, got {cluster.max_restarts}")
    if not routed:
        # NOTE: without +router= nothing changes; a cluster.* setting that
        # would be ignored is an error instead.
        default = ClusterConfig()
        for f in dataclasses.fields(ClusterConfig):
            if getattr(cluster, f.name) != getattr(default, f.name):
                raise ConfigError(
                    f"'cluster.{f.name}' needs a gateway in front of the replicas: add "
                    f"+router=<option> (valid options: {', '.join(group_options('router'))})")
        return
    if cluster.discovery is Discovery.kubernetes:
        if cluster.replicas != 1:
            raise ConfigError("'cluster.replicas' must stay 1 with cluster.discovery=kubernetes: the gateway "
                              "discovers the worker pods; scale their Deployment instead")
        if not selector_terms(cluster.selector):
            raise ConfigError(f"invalid value for 'cluster.selector': needs key=value labels, got {cluster.selector}")


def _ports(cluster: ClusterConfig, gateway_port: int) -> list[int]:
    first = cluster.worker_port if cluster.worker_port is not None else gateway_port + 1
    ports = [first + i for i in range(cluster.replicas)]
    if gateway_port in ports or not all(1 <= p <= 65535 for p in ports):
        raise ConfigError(f"invalid value for 'cluster.worker_port': worker ports {ports[0]}..{ports[-1]} "
                          f"must be valid and leave server.port={gateway_port} to the gateway")
    return ports


def cpu_sets(replicas: int, cpus: Iterable[int]) -> tuple[tuple[int, ...], ...]:
    """Split the CPUs ``cpus`` (ids, e.g. this process's affinity) among
    ``replicas`` workers: disjoint equal shares while there are enough, else
    round-robin single CPUs (shared)."""
    ids = sorted(cpus)
    share = max(1, len(ids) // replicas)
    return tuple(tuple(ids[(i * share + j) % len(ids)] for j in range(share)) for i in range(replicas))


def resolve_cluster(cfg: DictConfig, plan: LaunchPlan) -> ClusterPlan | None:
    """The unit ``cfg`` asks for, or ``None`` for one plain SGLang server."""
    cluster = _cluster_config(cfg)
    spec = plan.policies.get("router")
    _check(cluster, spec is not None)
    if spec is None:
        return None
    port = int(cfg.server.port)
    gateway = functools.partial(gateway_plan, spec.needs_of(), spec.host_settings(),
                                host=str(cfg.server.host), port=port, log_level=str(cfg.server.log_level),
                                grace_s=plan.shutdown_grace_s, model_name=str(cfg.model.name))
    if cluster.discovery is Discovery.kubernetes:
        front = gateway(discovery=cluster)
        return ClusterPlan(front, (), (), cluster.max_restarts, front.ports)
    ports = _ports(cluster, port)
    workers: list[LaunchPlan] = []
    sets: tuple[tuple[int, ...], ...] = ()
    if plan.device == "cpu":
        sets = cpu_sets(cluster.replicas, os.sched_getaffinity(0))
    for i, p in enumerate(ports):
        # NOTE: workers listen on loopback only; clients reach them through the gateway.
        threads = len(sets[i]) if sets else plan.cpu_threads
        workers.append(dataclasses.replace(plan, sglang=dict(plan.sglang, host="127.0.0.1", port=p),
                                           cpu_threads=threads))
    front = gateway(worker_urls=[f"http://127.0.0.1:{p}" for p in ports])
    chosen_by = ("cluster.worker_port" if cluster.worker_port is not None
                 else "cluster.worker_port=null (server.port + 1)")
    worker_ports = [PortUse(p, "127.0.0.1", f"{chosen_by} + {i}" if i else chosen_by) for i, p in enumerate(ports)]
    return ClusterPlan(front, tuple(workers), sets, cluster.max_restarts, (*front.ports, *worker_ports))
