"""``+router=power_of_two``: twin of SMG's ``power_of_two`` (``policies/power_of_two.rs``)."""

from __future__ import annotations

from policies.router import RouteDecision, RouterNeeds, RouteView, healthy_indices
from policies.router.pick import fewest_in_flight, high, least_in_flight, low

#: ``--power-of-two-load-metric`` choices (SMG 1.13).
LOAD_METRICS = ("expected_wait", "requests", "least_requests")


class PowerOfTwoPolicy:
    """Sample two distinct healthy workers; send to the one with fewer in flight.

    As SMG: ``i1 = rand(n)``, ``i2 = (i1 + 1 + rand(n - 1)) % n`` over the
    healthy list; a single healthy worker is picked directly. Ties between
    the pair go uniformly at random. ``least_requests`` skips the sampling and
    takes the fewest in flight over every healthy worker.

    Simplification: SMG's default ``expected_wait`` metric scores the pair by
    backend-reported loads; with none reported it compares gateway in-flight
    counts, which is what this twin does for ``expected_wait`` and
    ``requests`` alike.
    """

    def __init__(self, load_metric: str = "expected_wait") -> None:
        """``load_metric``: SMG's ``--power-of-two-load-metric`` (``expected_wait``,
        ``requests`` or ``least_requests``)."""
        if load_metric not in LOAD_METRICS:
            raise ValueError(f"load_metric must be one of {', '.join(LOAD_METRICS)}, got {load_metric!r}")
        self.load_metric = load_metric
        self.needs = RouterNeeds(gateway_policy="power_of_two",
                                 gateway_flags=(("--power-of-two-load-metric", load_metric),))

    def route(self, view: RouteView) -> RouteDecision:
        healthy = healthy_indices(view)
        n = len(healthy)
        if n == 1:
            return RouteDecision(healthy[0], "single")
        if self.load_metric == "least_requests":
            return RouteDecision(least_in_flight(view, healthy, view.draw), "least_requests")
        i1 = low(view.draw) % n
        i2 = (i1 + 1 + high(view.draw) % (n - 1)) % n
        pair = fewest_in_flight(view, [healthy[i1], healthy[i2]])
        # NOTE: a tied pair is split by the low draw's quotient, independent of i1
        return RouteDecision(pair[(low(view.draw) // n) % len(pair)], "pair")
