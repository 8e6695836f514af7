"""``+router=random``: twin of SMG's ``random`` (``policies/random.rs``)."""

from __future__ import annotations

from policies.router import RouteDecision, RouterNeeds, RouteView, healthy_indices
from policies.router.pick import uniform


class RandomPolicy:
    """A healthy worker uniformly at random (by ``view.draw``)."""

    def __init__(self) -> None:
        self.needs = RouterNeeds(gateway_policy="random")

    def route(self, view: RouteView) -> RouteDecision:
        return RouteDecision(uniform(healthy_indices(view), view.draw), "random")
