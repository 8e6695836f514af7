"""Choices every SMG twin shares: uniform picks and least-in-flight with random ties.

``draw`` is the request's one uniform 64-bit integer (``RouteView.draw``).
Where a policy needs two independent choices it splits it: the low 32 bits
for the first, the high 32 bits for the second (``low``, ``high``).
NOTE: a modulo of a 32-bit draw is uniform to within ``n / 2**32``.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.router import RouteView


def low(draw: int) -> int:
    """The draw's low 32 bits."""
    return draw & 0xFFFF_FFFF


def high(draw: int) -> int:
    """The draw's high 32 bits."""
    return (draw >> 32) & 0xFFFF_FFFF


def uniform(candidates: Sequence[int], draw: int) -> int:
    """One of ``candidates`` (non-empty), uniformly by ``draw``."""
    return candidates[draw % len(candidates)]


def fewest_in_flight(view: RouteView, candidates: Sequence[int]) -> list[int]:
    """The candidates (non-empty) with the fewest requests in flight, in list order."""
    loads = [view.workers[i].in_flight for i in candidates]
    fewest = min(loads)
    return [i for i, load in zip(candidates, loads, strict=True) if load == fewest]


def least_in_flight(view: RouteView, candidates: Sequence[int], draw: int) -> int:
    """Join-shortest-queue over ``candidates``, ties uniformly at random.

    NOTE: SMG's expected-wait selector (``least_load.rs``) reduces to this
    when no worker reports backend loads ("whole fleet dark")."""
    return uniform(fewest_in_flight(view, candidates), draw)


def first_least_in_flight(view: RouteView, candidates: Sequence[int]) -> int:
    """The first candidate in list order with the fewest in flight (Rust ``min_by_key``)."""
    return min(candidates, key=lambda i: view.workers[i].in_flight)
