"""Simulator binding of the router kind (``+router``): replicas behind the gateway.

``+router`` puts a ``ClusterDeployment`` on the gateway's record
(``Scope.gateway``: ``SimParts.deployment``), so the run (``servers.simulate``)
replays the trace through ``cluster.Cluster``: ``sim.replicas`` simulators,
each built from its own replica record (policy objects keep per-server state).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import numpy as np

from bench.metrics import RequestRecord, Timeline, hit_rate
from bench.sim import CostModel, SimSettings, build_simulator, records_of
from bench.sim.binding import Scope, SimParts, sim_parts
from bench.sim.cluster import Cluster, ClusterSampler
from bench.sim.overlap import IterationLog, client_visible, overlap_charged
from bench.traces import Trace
from compose.specs import build_policy

if TYPE_CHECKING:
    from bench.config import BenchSettings
    from compose.specs import PolicySpec
    from policies.router import RouterPolicy


class _RouterBinding:
    """``+router``: the gateway's routing policy."""

    scope = Scope.gateway
    counters: tuple[str, ...] = ()

    def attach(self, spec: PolicySpec, settings: BenchSettings, parts: SimParts) -> None:
        parts.deployment = ClusterDeployment(build_policy(spec))


BINDING = _RouterBinding()


class ClusterDeployment:
    """``sim.replicas`` simulated servers behind the gateway's ``router`` (``bench.sim.binding.Deployment``)."""

    def __init__(self, router: RouterPolicy) -> None:
        self.router = router

    def __call__(self, settings: BenchSettings, trace: Trace, cost: CostModel, sim_settings: SimSettings,
                 on_final: Callable[[Any], None]) -> tuple[list[RequestRecord], Timeline, dict[str, Any]]:
        return simulate_cluster(settings, self.router, trace, cost, sim_settings, on_final)


def simulate_cluster(settings: BenchSettings, router: RouterPolicy, trace: Trace, cost: CostModel,
                     sim_settings: SimSettings, on_final: Callable[[Any], None]
                     ) -> tuple[list[RequestRecord], Timeline, dict[str, Any]]:
    """``sim.replicas`` simulators behind ``router`` (``cluster.py``)."""
    n = settings.sim.replicas  # NOTE: >= 1 (servers.simulate)
    replicas = [sim_parts(settings, Scope.replica) for _ in range(n)]
    # NOTE: the replicas run the same kinds: one charge for all
    charged, sync = overlap_charged(cost, settings.accelerator, replicas[0].overlap_off)
    logs = [IterationLog(charged) if sync else None for _ in range(n)]
    sims = [build_simulator(trace, it if it is not None else charged, sim_settings, p)
            for p, it in zip(replicas, logs, strict=True)]
    cluster = Cluster(trace, sims, router, seed=settings.sim.router_seed, key=settings.sim.routing_key)
    sampler = ClusterSampler(cluster, settings.metrics.timeline_dt_s)
    for sim, it in zip(sims, logs, strict=True):
        sim.on_sample, sim.on_final = sampler, on_final
        if it is not None:
            it.clock = (lambda s: lambda: s.now)(sim)
    cluster.run()
    per_replica = []
    for sim, it in zip(sims, logs, strict=True):
        recs = records_of(sim)
        per_replica.append(client_visible(recs, it) if it is not None else recs)
    records = cluster.merged(per_replica)
    rows = np.array(sampler.rows, dtype=np.float64).reshape(-1, 5)
    timeline = Timeline(t=rows[:, 0].copy(), waiting=rows[:, 1].astype(int), running=rows[:, 2].astype(int),
                        kv_used=rows[:, 3].astype(np.int64), kv_cached=rows[:, 4].astype(np.int64),
                        capacity=n * sim_settings.capacity)
    meta = {
        "sim": asdict(sim_settings), "replicas": n, "routing_key": settings.sim.routing_key.value,
        "router_branches": dict(cluster.branches), "cluster": cluster,
        "per_replica": [{
            "url": url, "requests": len(recs), "prefix_hit_rate": hit_rate(recs),
            "iterations": sim.num_iterations, "simulated_s": sim.now,
            "evicted_tokens": sim.cache.num_evicted_tokens,
        } for url, sim, recs in zip(cluster.urls, sims, per_replica, strict=True)],
        "iterations": sum(s.num_iterations for s in sims), "simulated_s": max(s.now for s in sims),
        "evicted_tokens": sum(s.cache.num_evicted_tokens for s in sims),
        "token_times": "as clients see them (synchronous forward: one iteration late)" if sync
        else "iteration ends",
    }
    return records, timeline, meta
