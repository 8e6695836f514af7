"""Simulator bindings of the kinds that run inside each simulated SGLang server.

Each attaches the policy object to the simulator part that mirrors the SGLang
seam the server binding hooks (``bench/sim/__init__.py``'s table):

* ``+policy``    → ``queue.WaitingQueue`` (and, for a diffusion LM, the dLLM rounds);
* ``+cache``     → ``cache.PrefixCache``;
* ``+admission`` → ``admission.AdmissionGate``;
* ``+adapters``  → ``adapters.AdapterSlotTable``, with the request mix from ``sim.adapters_*``.

The gateway's kind (``+router``) binds in ``cluster_run.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench.sim.binding import Scope, SimParts
from compose.specs import build_policy

if TYPE_CHECKING:
    from bench.config import BenchSettings
    from compose.specs import PolicySpec


class _OrderBinding:
    """``+policy``: the waiting queue's (or the dLLM rounds') order."""

    scope = Scope.replica

    def attach(self, spec: PolicySpec, settings: BenchSettings, parts: SimParts) -> None:
        parts.order = build_policy(spec)


class _CacheBinding:
    """``+cache``: the prefix cache's eviction order (its host tier: ``cache.host_tier_tokens``)."""

    scope = Scope.replica

    def attach(self, spec: PolicySpec, settings: BenchSettings, parts: SimParts) -> None:
        parts.eviction = build_policy(spec)


class _AdmissionBinding:
    """``+admission``: the arrival gate."""

    scope = Scope.replica

    def attach(self, spec: PolicySpec, settings: BenchSettings, parts: SimParts) -> None:
        parts.admission = build_policy(spec)


class _AdaptersBinding:
    """``+adapters``: the LoRA slots (``adapters.max_per_batch``) and which adapter each request names."""

    scope = Scope.replica

    def attach(self, spec: PolicySpec, settings: BenchSettings, parts: SimParts) -> None:
        from bench.sim.adapters import AdapterMix, AdapterSlotTable

        sim = settings.sim
        parts.adapters = AdapterSlotTable(build_policy(spec), spec.host_settings().max_per_batch,
                                          sim.adapter_load_s)
        if sim.adapters_count:
            parts.adapter_mix = AdapterMix(sim.adapters_count, sim.adapters_zipf_s, sim.adapters_base_share,
                                           sim.adapters_seed)


SCHEDULING = _OrderBinding()
CACHE = _CacheBinding()
ADMISSION = _AdmissionBinding()
ADAPTERS = _AdaptersBinding()
