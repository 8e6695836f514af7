"""``+router=cache_aware``: twin of SMG's ``cache_aware`` (``policies/cache_aware.rs``),
SMG's default policy, with the 1.13 miss path and spill margin."""

from __future__ import annotations

import math

from policies.router import RouteDecision, RouterNeeds, RouteView, healthy_indices
from policies.router.pick import high, least_in_flight, low
from policies.router.tree import CharTree

#: Floor of the 1.13 spill margin, in requests.
MIN_SPILL_MARGIN = 4.0


class CacheAwarePolicy:
    """Send a request where the longest prefix of its text went before, unless that worker is far busier.

    Per request, over the healthy workers (``mean`` in-flight):

    1. Match the routing text in the shared character tree
       (``policies/router/tree.py``): ``rate = matched chars / text chars``.
    2. Hit (``rate > cache_threshold``, strictly): among the healthy tenants
       where the match stopped, the one with the fewest in flight (ties at
       random). Spill gate: if its load is above ``balance_rel_threshold *
       mean`` *and* above ``mean + margin``, with the 1.13 margin
       ``min(balance_abs_threshold, max(4, 2 * sqrt(mean)))``, the request
       goes to the least-loaded worker instead (ties at random) and that
       worker becomes a tenant: hot prefixes replicate. Branches
       ``tree_match`` / ``spill``.
    3. Miss: the fewest in flight, ties at random (1.13's expected-wait
       selector with no backend loads), branch ``expected_wait_fallback``.
    4. The full text is inserted for the chosen worker. A hit whose tenants
       are all unhealthy goes to the first healthy worker, with no insert
       (``first_healthy_fallback``).

    Simplifications (``docs/router.md``): SMG evicts every
    ``eviction_interval_secs`` of wall-clock time; this twin has no clock and
    evicts when the tree exceeds ``max_tree_size`` by a sixteenth (standing
    in for the growth between passes), down to ``max_tree_size``, oldest
    insert first (SMG also refreshes a leaf on 1 in 8 matches; here only
    inserts do). The margin's ``sqrt(mean)`` is inferred from 1.13's help
    text and observations. Token-id requests use the same character tree on
    their text (SMG keeps a separate page-aligned token tree). Backend loads
    (SMG's KV thresholds, off by default; load reports) play no part.
    """

    def __init__(self, cache_threshold: float = 0.3, balance_abs_threshold: int = 64,
                 balance_rel_threshold: float = 1.5, eviction_interval_secs: int = 60,
                 max_tree_size: int = 67108864) -> None:
        """``cache_threshold``: match rate above which a request is a hit (``--cache-threshold``);
        ``balance_abs_threshold`` / ``balance_rel_threshold``: the spill gate
        (``--balance-abs-threshold``, ``--balance-rel-threshold``);
        ``eviction_interval_secs``: SMG's eviction period (``--eviction-interval-secs``;
        passed to the gateway, see the class docs for the twin);
        ``max_tree_size``: characters the tree keeps (``--max-tree-size``)."""
        if not 0.0 <= cache_threshold <= 1.0:
            raise ValueError(f"cache_threshold must be in [0, 1], got {cache_threshold}")
        if balance_abs_threshold < 0:
            raise ValueError(f"balance_abs_threshold must be >= 0, got {balance_abs_threshold}")
        if balance_rel_threshold < 0:
            raise ValueError(f"balance_rel_threshold must be >= 0, got {balance_rel_threshold}")
        if eviction_interval_secs < 1:
            raise ValueError(f"eviction_interval_secs must be >= 1, got {eviction_interval_secs}")
        if max_tree_size < 1:
            raise ValueError(f"max_tree_size must be >= 1, got {max_tree_size}")
        self.cache_threshold = cache_threshold
        self.balance_abs_threshold = balance_abs_threshold
        self.balance_rel_threshold = balance_rel_threshold
        self.eviction_interval_secs = eviction_interval_secs
        self.max_tree_size = max_tree_size
        self.needs = RouterNeeds(gateway_policy="cache_aware", gateway_flags=(
            ("--cache-threshold", repr(float(cache_threshold))),
            ("--balance-abs-threshold", str(balance_abs_threshold)),
            ("--balance-rel-threshold", repr(float(balance_rel_threshold))),
            ("--eviction-interval-secs", str(eviction_interval_secs)),
            ("--max-tree-size", str(max_tree_size)),
        ))
        self.tree = CharTree()
        self._registered: frozenset[str] = frozenset()

    def spill_margin(self, mean: float) -> float:
        """The 1.13 absolute margin at pool mean ``mean``."""
        return min(float(self.balance_abs_threshold), max(MIN_SPILL_MARGIN, 2.0 * math.sqrt(mean)))

    def route(self, view: RouteView) -> RouteDecision:
        self._forget_removed(view)
        healthy = healthy_indices(view)
        text = view.text if view.text or not view.token_ids else " ".join(map(str, view.token_ids))
        matched, tenants = self.tree.match(text)
        rate = matched / len(text) if text else 0.0
        if rate > self.cache_threshold:
            holders = set(tenants)
            candidates = [i for i in healthy if view.workers[i].url in holders]
            if not candidates:
                return RouteDecision(healthy[0], "first_healthy_fallback")
            pick, branch = least_in_flight(view, candidates, low(view.draw)), "tree_match"
            mean = sum(view.workers[i].in_flight for i in healthy) / len(healthy)
            load = view.workers[pick].in_flight
            if load > self.balance_rel_threshold * mean and load > mean + self.spill_margin(mean):
                pick, branch = least_in_flight(view, healthy, high(view.draw)), "spill"
        else:
            pick, branch = least_in_flight(view, healthy, low(view.draw)), "expected_wait_fallback"
        self.tree.insert(text, view.workers[pick].url)
        if self.tree.total_chars > self.max_tree_size + self.max_tree_size // 16:
            self.tree.evict(self.max_tree_size)
        return RouteDecision(pick, branch)

    def _forget_removed(self, view: RouteView) -> None:
        """Purge the tenants of workers no longer registered (SMG ``remove_worker_by_url``)."""
        urls = frozenset(w.url for w in view.workers)
        if urls != self._registered:
            for gone in self._registered - urls:
                self.tree.remove_tenant(gone)
            self._registered = urls
