"""An eviction order timed on the hook clock, for the caches that rank through it.

SGLang's own trees rank through the strategy seam (``eviction.py``), which times
each ``get_priority``; the gap cache (its pure tree, ``radix/``) and the
snapshot cache call the policy's ``rank`` themselves, so they get the policy
wrapped in ``TimedRanks``: every rank, wherever it is asked for, adds to the
``eviction`` hook (``switchboard_hook_seconds_total{hook="eviction"}``).
No SGLang import.
"""

from __future__ import annotations

import time
from typing import Any

from policies.cache import BlockView, EvictionNeeds, EvictionPolicy, EvictionRank
from server.sglang.scheduling.hook_clock import HOOK_CLOCK


class TimedRanks:
    """``policy`` with each ``rank`` call added to the hook clock (module docs)."""

    def __init__(self, policy: EvictionPolicy) -> None:
        self.inner = policy
        self.needs: EvictionNeeds = policy.needs

    def rank(self, block: BlockView) -> EvictionRank:
        t = time.perf_counter()
        rank = self.inner.rank(block)
        HOOK_CLOCK.add("eviction", time.perf_counter() - t)
        return rank

    def __getattr__(self, name: str) -> Any:
        # NOTE: the policy's own parameters, for a host that reads one (only rank is timed)
        return getattr(self.inner, name)

    def __str__(self) -> str:
        return str(self.inner)
