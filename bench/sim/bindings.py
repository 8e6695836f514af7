"""Simulator bindings of the kinds that run inside each simulated SGLang server.

Each attaches the policy object to the simulator part that mirrors the SGLang
seam the server binding hooks (``bench/sim/__init__.py``'s table):

* ``+policy``    → ``queue.WaitingQueue`` (or, for a diffusion LM, the dLLM rounds);
* ``+cache``     → ``cache.PrefixCache``;
* ``+admission`` → ``admission.AdmissionGate``, a seam on the arrival event;
* ``+adapters``  → ``adapters.AdapterSeam`` (``AdapterSlotTable``, the request mix from
  ``sim.adapters_*``), a seam on the arrival, walk and batch events.

The gateway's kind (``+router``) binds in ``cluster_run.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench.sim.adapters import ADAPTER_EVICTIONS, ADAPTER_LOADS, AdapterMix, AdapterSeam, AdapterSlotTable
from bench.sim.admission import add_gate
from bench.sim.binding import Scope, SimParts
from compose.specs import build_policy

if TYPE_CHECKING:
    from bench.config import BenchSettings
    from compose.specs import PolicySpec


class _OrderBinding:
    """``+policy``: the waiting queue's order, or on a diffusion LM the dLLM rounds' (the
    served model picks the face, as on the server)."""

    scope = Scope.replica
    counters: tuple[str, ...] = ()

    def attach(self, spec: PolicySpec, settings: BenchSettings, parts: SimParts) -> None:
        policy = build_policy(spec)  # NOTE: it has the faces its needs promise (the kind's ``faces``)
        # NOTE: compose/compat.py refused an option without the served model's face before
        if settings.sim.dllm.enabled:
            parts.rounds = policy
        else:
            parts.order = policy


class _CacheBinding:
    """``+cache``: the prefix cache's eviction order (its host tier: ``cache.host_tier_tokens``)."""

    scope = Scope.replica
    counters: tuple[str, ...] = ()

    def attach(self, spec: PolicySpec, settings: BenchSettings, parts: SimParts) -> None:
        policy = build_policy(spec)
        # NOTE: SGLang's own host tier beside the gap cache is refused before (compose/compat.py)
        parts.eviction = policy
        host = spec.host_settings()
        parts.host_tier_tokens = host.host_tier_tokens
        if spec.needs_of().snapshots:
            # NOTE: a hybrid model is checked before (compose/compat.py); sim.hybrid models it
            parts.snapshot_store_bytes = int(host.snapshot_gb * (1 << 30))
            parts.snapshot_read_tokens = host.snapshot_read_tokens
        if spec.needs_of().interior:
            # NOTE: the server's gap cache forces disable_overlap_schedule (server/sglang/cache/binding.py)
            parts.overlap_off.append(f"+cache ({spec.target}): the gap cache")


class _AdmissionBinding:
    """``+admission``: the arrival gate."""

    scope = Scope.replica
    counters: tuple[str, ...] = ()

    def attach(self, spec: PolicySpec, settings: BenchSettings, parts: SimParts) -> None:
        add_gate(parts, build_policy(spec))


class _AdaptersBinding:
    """``+adapters``: the LoRA slots (``adapters.max_per_batch``) and which adapter each request names."""

    scope = Scope.replica
    counters = (ADAPTER_LOADS, ADAPTER_EVICTIONS)

    def attach(self, spec: PolicySpec, settings: BenchSettings, parts: SimParts) -> None:
        sim = settings.sim
        table = AdapterSlotTable(build_policy(spec), spec.host_settings().max_per_batch, sim.adapter_load_s)
        mix = AdapterMix(sim.adapters_count, sim.adapters_zipf_s, sim.adapters_base_share,
                         sim.adapters_seed) if sim.adapters_count else None
        parts.seams.append(AdapterSeam(table, mix))


SCHEDULING = _OrderBinding()
CACHE = _CacheBinding()
ADMISSION = _AdmissionBinding()
ADAPTERS = _AdaptersBinding()
