"""``+router=round_robin``: twin of SMG's ``round_robin`` (``policies/round_robin.rs``)."""

from __future__ import annotations

from policies.router import RouteDecision, RouterNeeds, RouteView, healthy_indices


class RoundRobinPolicy:
    """Cycle over the healthy workers in the gateway's list order.

    A counter starts at 0 and advances once per request; the request goes to
    ``healthy[counter % len(healthy)]``. An unhealthy worker is skipped by
    re-indexing (the modulo runs over the shrunken list), so the cyclic
    position shifts when health changes, as in SMG.

    Simplification: SMG also advances the counter on each retry (every retry
    is a fresh selection); hosts here never retry. Whether 1.13 keeps one
    counter per candidate set is unconfirmed (``docs/smg-routing-notes.md``
    §2); this twin keeps one.
    """

    def __init__(self) -> None:
        self.needs = RouterNeeds(gateway_policy="round_robin")
        self._counter = 0

    def route(self, view: RouteView) -> RouteDecision:
        healthy = healthy_indices(view)
        pick = healthy[self._counter % len(healthy)]
        self._counter += 1
        return RouteDecision(pick, "round_robin")
