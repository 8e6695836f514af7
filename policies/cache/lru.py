"""``+cache=lru``: least recently used first (SGLang's default order), as a pure
policy that runs through Switchboard's eviction seam."""

from __future__ import annotations

from dataclasses import dataclass

from policies.cache import BlockView, EvictionRank, HostTier


@dataclass(frozen=True)
class LruPolicy(HostTier):
    """Oldest ``last_access`` first; ties by creation order.

    The ``HostTier`` fields (default: no host tier) give the simulator's cache
    a host-memory second tier (``++cache.host_tier_tokens=N``)."""

    def rank(self, block: BlockView) -> EvictionRank:
        return (block.last_access, block.created)
