"""``+router=least_load``: twin of SMG's ``least_load`` (``policies/least_load.rs``)."""

from __future__ import annotations

from policies.router import RouteDecision, RouterNeeds, RouteView, healthy_indices
from policies.router.pick import least_in_flight


class LeastLoadPolicy:
    """The healthy worker with the fewest requests in flight; ties uniformly at random.

    Simplification: SMG scores each worker by its expected wait from
    backend-reported loads (``(queued tokens + credit) / throughput`` plus a
    KV-pressure term, polled every ``--load-monitor-interval``); only when no
    worker reports loads ("whole fleet dark") does it join the shortest queue
    of gateway in-flight counts, which is what this twin always does.
    """

    def __init__(self) -> None:
        self.needs = RouterNeeds(gateway_policy="least_load")

    def route(self, view: RouteView) -> RouteDecision:
        return RouteDecision(least_in_flight(view, healthy_indices(view), view.draw), "least_load")
