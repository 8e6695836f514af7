"""``+router=consistent_hashing``: twin of SMG's ``consistent_hashing``
(``policies/consistent_hashing.rs``)."""

from __future__ import annotations

from policies.router import RouteDecision, RouterNeeds, RouteView, healthy_indices
from policies.router.pick import uniform
from policies.router.ring import RingCache


class ConsistentHashingPolicy:
    """Requests with a routing key go where the key lands on the ring; the rest at random.

    The key (``RouteView.routing_key``, SMG's ``x-smg-routing-key`` header)
    is placed on the ring by blake3 directly (no xxh3 step, unlike
    ``prefix_hash``); the ring holds every registered worker (150 vnodes per
    URL, ``policies/router/ring.py``) and the lookup walks clockwise to the
    first healthy one. Load plays no part. A request without a key goes to a
    healthy worker uniformly at random.

    Simplifications: SMG's ``X-SMG-Target-Worker`` index header and its
    implicit keys (the ``x-forwarded-for`` or ``cookie`` header) are not in
    the view; a host that wants them passes them as ``routing_key``.
    """

    def __init__(self) -> None:
        self.needs = RouterNeeds(gateway_policy="consistent_hashing")
        self._rings = RingCache()

    def route(self, view: RouteView) -> RouteDecision:
        healthy = healthy_indices(view)
        if view.routing_key is None:
            return RouteDecision(uniform(healthy, view.draw), "random")
        by_url: dict[str, int] = {}
        for i in healthy:
            by_url.setdefault(view.workers[i].url, i)
        ring = self._rings.ring(tuple(w.url for w in view.workers))
        url = ring.find(view.routing_key, by_url.__contains__)
        assert url is not None  # NOTE: every healthy URL is on the ring
        return RouteDecision(by_url[url], "ring")
