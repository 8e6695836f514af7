"""The tier cache's setup in SGLang's scheduler process: what it places with, and its registration.

* ``TierSessions``: keeps ``SessionStats`` from admitted requests (the
  scheduler's ``OnAdmitted`` event) and finished ones (``ObservesFinished``),
  and tells a policy that learns;
* ``register_tier_cache``: ``--radix-cache-backend switchboard_tier`` builds a
  ``TierCache`` (``tier_cache.py``) through SGLang's own unified-cache factory,
  with the Python tree core forced (the cache reads its nodes).

The binding's ``install`` calls them (``binding.py``).
"""

from __future__ import annotations

from typing import Any

from policies.tier.sessions import SessionFeedback
from server.sglang.cache.names import register_backend
from server.sglang.hicache.names import TIER_CACHE_BACKEND
from server.sglang.hicache.tier_cache import Placement, TierCache

_active: dict[str, Placement] = {}


def register_tier_cache(placement: Placement) -> str:
    """Make ``--radix-cache-backend switchboard_tier`` build a ``TierCache`` placing with
    ``placement`` (re-entrant: a later call replaces it). Returns the backend name."""
    from sglang.srt.managers.scheduler import Scheduler

    # NOTE: TierCache.is_backuped relaxes the scheduler's prefetch gate: it must still be asked there
    if "is_backuped" not in Scheduler._prefetch_kvcache.__code__.co_names:
        raise RuntimeError("switchboard: SGLang's Scheduler._prefetch_kvcache no longer asks is_backuped; "
                           "the tier cache's prefetch below a device prefix is unchecked (hicache/tier_cache.py)")
    _active["placement"] = placement
    return register_backend(TIER_CACHE_BACKEND, _build)


def _build(ctx: Any) -> Any:
    from sglang.srt.mem_cache.registry import create_unified_radix_cache

    if not ctx.enable_hierarchical_cache or ctx.disable_radix_cache:
        raise ValueError(f"the {TIER_CACHE_BACKEND} cache needs SGLang's hierarchical cache and the prefix cache")
    ctx.params.tree_core_backend = "python"  # NOTE: the hooks read the Python core's nodes
    cache = create_unified_radix_cache(ctx, cache_class=TierCache)
    if cache.cache_controller is None:
        raise ValueError(f"the {TIER_CACHE_BACKEND} cache built no HiCache controller")
    cache.attach(_active["placement"])
    return cache


class TierSessions(SessionFeedback):
    """Session facts for placements: admitted requests (the scheduler's ``OnAdmitted``) and,
    as its ``SessionFeedback``, finished ones."""

    def on_admitted(self, req: Any) -> None:
        self.stats.arrived(getattr(req, "session_id", None), len(req.origin_input_ids))
