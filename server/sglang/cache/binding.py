"""Server binding of the cache kind (``+cache``): SGLang's prefix cache.

Launch: a tail-first option runs through SGLang's eviction-strategy seam
(``--radix-eviction-policy switchboard``, ``eviction.py``); an option that
frees history from the front (``needs.interior``) needs a cache that holds
gaps: ours, through SGLang's cache registry (``gap_cache.py``), with page size
1 and no overlap scheduling, never a silent fallback to tail-first eviction;
an option that ranks a hybrid model's recurrent-state snapshots
(``needs.snapshots``) needs the snapshot cache (``histate_cache.py``), through
the same registry.
An order that asks for SGLang's waiting-prefix refresh (``needs.refresh_waiting``,
e.g. LRU) keeps it: through the eviction seam, SGLang's own refresh stops (it
runs under the ``lru`` name only), so ``refresh.py`` runs it again; the gap and
snapshot caches leave SGLang's own running, pinned to that name.
Install: the matching one of the three, in every scheduler process.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from compose.config import ConfigError
from compose.specs import build_policy
from server.sglang.cache.names import (
    EVICTION_STRATEGY_NAME,
    GAP_CACHE_BACKEND,
    HISTATE_CACHE_BACKEND,
    register_eviction_choice,
)
from server.sglang.cache.symbols import CACHE_SYMBOLS
from server.sglang.cache.timed_ranks import TimedRanks
from server.sglang.launch.binding import ForcedFlag, LaunchFields, SchedulerParts

if TYPE_CHECKING:
    from compose.specs import PolicySpec
    from policies.cache import EvictionNeeds
    from server.resolve import LaunchPlan


class CacheBinding:
    """``+cache``: the eviction seam or the gap cache, and the flags each needs."""

    symbols = CACHE_SYMBOLS
    """Its rows of the hook contract (the eviction seam and the gap cache)."""

    def launch(self, spec: PolicySpec, launch: LaunchFields) -> list[ForcedFlag]:
        fields = launch.fields
        if fields.get("disable_radix_cache"):
            raise ConfigError("+cache needs the prefix cache; remove sglang.disable_radix_cache")
        needs = spec.needs_of()
        if needs.interior or needs.snapshots:
            if not needs.refresh_waiting:
                # NOTE: these caches keep SGLang's own refresh, which cannot be turned off per order
                raise ConfigError(f"+cache ({spec.target}) holds gaps or snapshots without the waiting-prefix "
                                  "refresh SGLang runs for them; set EvictionNeeds.refresh_waiting")
            return [*self._cache_flags(spec, needs, fields),
                    ForcedFlag("radix_eviction_policy", "lru", "SGLang refreshes the waiting queue's prefixes under this "
                               "name only", control=False)]
        return self._cache_flags(spec, needs, fields)

    @staticmethod
    def _cache_flags(spec: PolicySpec, needs: EvictionNeeds, fields: Mapping[str, Any]) -> list[ForcedFlag]:
        """The flags that select the option's cache (module docs)."""
        # NOTE: cache.host_tier_tokens with a tail-first cache is refused before (compose/compat.py)
        if needs.snapshots:
            # NOTE: the hybrid model, the store's size and SGLang's host tier are checked before (compose/compat.py)
            if spec.host_settings().snapshot_dir is None:
                raise ConfigError(f"+cache ({spec.target}) demotes recurrent-state snapshots to an SSD store: "
                                  "set cache.snapshot_dir")
            if fields.get("speculative_algorithm"):
                raise ConfigError(f"sglang.speculative_algorithm conflicts with +cache ({spec.target}): "
                                  "the snapshot cache reads one state per node, not speculative ones")
            return [ForcedFlag("radix_cache_backend", HISTATE_CACHE_BACKEND, "the snapshot cache", control=False)]
        if not needs.interior:
            return [ForcedFlag("radix_eviction_policy", EVICTION_STRATEGY_NAME,
                               "the eviction order runs through SGLang's strategy registry", control=False)]
        why = f"+cache ({spec.target}) freeing history from the front (gap cache)"
        # NOTE: sglang.enable_hierarchical_cache beside the gap cache is refused before (compose/compat.py)
        if fields.get("speculative_algorithm"):
            raise ConfigError(f"sglang.speculative_algorithm conflicts with {why}")
        return [ForcedFlag("radix_cache_backend", GAP_CACHE_BACKEND, "the gap cache", control=False),
                ForcedFlag("page_size", 1, "the gap cache cuts gaps per token"),
                # NOTE: a gap chunk's checkpoint hands the request its cached tail
                # before the next chunk is planned; overlap scheduling plans first.
                ForcedFlag("disable_overlap_schedule", True,
                           "a gap chunk's checkpoint must land before the next chunk is planned")]

    def install(self, spec: PolicySpec, plan: LaunchPlan, parts: SchedulerParts) -> None:
        cache = build_policy(spec)
        needs = spec.needs_of()
        if needs.snapshots:
            from server.sglang.cache.histate_setup import register_histate_cache

            # NOTE: --radix-cache-backend switchboard_histate (launch above); ranks timed as the seam's
            register_histate_cache(TimedRanks(cache), spec.host_settings())
        elif needs.interior:
            from server.sglang.cache.gap_cache import register_gap_cache
            from server.sglang.cache.gap_prefill import GapRecomputeCounter, HoldsGaps

            # NOTE: --radix-cache-backend switchboard_gap (launch above); its prefill
            # walk and gap accounting subscribe to the scheduler's events
            register_gap_cache(TimedRanks(cache), spec.host_settings().host_tier_tokens)
            parts.seams.append(lambda s: GapRecomputeCounter() if isinstance(s.tree_cache, HoldsGaps) else None)
        else:
            from server.sglang.cache.eviction import install_eviction_policy

            install_eviction_policy(cache)
            if needs.refresh_waiting:
                from server.sglang.cache.refresh import WaitingPrefixRefresh

                # NOTE: --radix-eviction-policy switchboard stopped SGLang's own (module docs)
                parts.seams.append(lambda s: WaitingPrefixRefresh(s.tree_cache))
        parts.installed.append(f"cache={spec.target}")

    def extend_cli(self) -> None:
        register_eviction_choice()


BINDING = CacheBinding()
