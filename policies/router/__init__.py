"""Routing: which replica serves an arriving request.

Live, routing is done by SGLang's own gateway (SMG, ``smg`` on PyPI, pinned):
Switchboard never routes a request itself. Each option here is a *twin* of one
SMG policy: the gateway runs the real one (``RouterNeeds.gateway_policy`` with
``RouterNeeds.gateway_flags``) and the simulator runs the twin, so the same
``+router=<option>`` means the same thing in both hosts. What SMG does and
what a twin simplifies is written down in ``docs/smg-routing-notes.md`` and in
each option's docstring.

Contract (the host's side):
  * Every arriving request is offered to ``route`` once, with the view of the
    fleet at that moment: every *registered* worker in the gateway's own list
    order, each with its health and its in-flight count (requests routed to it
    and not yet answered).
  * The host sends the request to ``workers[decision.worker]`` and counts it in
    that worker's ``in_flight`` until it is answered.
  * ``draw`` is a fresh uniform 64-bit integer per request from the host's own
    seeded generator: the only randomness a policy may use (SMG breaks ties
    and picks on misses at random).

Contract (the policy's side): ``route`` returns the index of a *healthy*
worker (``check_decision``); given the same sequence of views it returns the
same decisions. A policy may keep state across requests (a round-robin
counter, a prefix tree), never clocks or globals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class WorkerView:
    """One registered worker as the gateway sees it."""

    url: str
    """The worker's URL exactly as registered (``http://127.0.0.1:30001``):
    hash rings are built from it, so it must match the gateway's."""
    in_flight: int = 0
    """Requests routed to this worker through the gateway, not yet answered."""
    healthy: bool = True
    """The gateway may route to it (health checks pass, circuit closed)."""


@dataclass(frozen=True, slots=True)
class RouteView:
    """An arriving request and the fleet it arrives into."""

    text: str
    """The routing text as SMG extracts it: for chat, every message's content
    joined with ``" "`` (raw content, not the chat-templated prompt); for
    completions the prompt."""
    workers: tuple[WorkerView, ...]
    """Every registered worker, in the gateway's list order."""
    draw: int = 0
    """A uniform random integer in ``[0, 2**64)``, fresh per request."""
    token_ids: tuple[int, ...] = ()
    """Prompt token ids when the request carries them (``/generate`` with
    ``input_ids``); SMG then routes on tokens instead of text."""
    routing_key: str | None = None
    """The routing-key header (``x-smg-routing-key``), if the client sent one."""


@dataclass(frozen=True, slots=True)
class RouteDecision:
    """Where a request goes."""

    worker: int
    """Index into ``RouteView.workers``."""
    branch: str = ""
    """Why, in SMG's own words where it logs one (``tree_match``, ``spill``,
    ``ring``, ``load_gate``, ``miss``): diagnostics, never read by a host."""


@dataclass(frozen=True)
class RouterNeeds:
    """What a routing policy needs from its host.

    NOTE: the one place a host learns a policy's needs (its ``needs``
    attribute). A live host cannot run a Python policy inside the gateway, so
    it needs the gateway's own implementation, named here."""

    gateway_policy: str = "round_robin"
    """SMG's ``--policy`` value whose behaviour this policy twins; the server
    starts the gateway with it."""
    gateway_flags: tuple[tuple[str, str], ...] = ()
    """SMG command-line flags carrying this policy's parameters, as
    ``(flag, value)`` pairs (``("--prefix-token-count", "256")``); the server
    passes them verbatim."""


@runtime_checkable
class RouterPolicy(Protocol):
    """Chooses the replica that serves an arriving request (see module docs)."""

    needs: RouterNeeds
    """What the policy needs from its host (``RouterNeeds``)."""

    def route(self, view: RouteView) -> RouteDecision:
        """Pick a healthy worker of ``view.workers`` for ``view``'s request."""
        ...


class NoHealthyWorker(RuntimeError):
    """No registered worker is healthy: SMG answers 503 ``no_available_workers``."""


def healthy_indices(view: RouteView) -> list[int]:
    """Indices of the healthy workers, in list order; raises ``NoHealthyWorker``."""
    idx = [i for i, w in enumerate(view.workers) if w.healthy]
    if not idx:
        raise NoHealthyWorker("no healthy worker")
    return idx


def check_decision(view: RouteView, decision: RouteDecision) -> RouteDecision:
    """Return ``decision``, or raise ``ValueError`` if it names no healthy worker.

    NOTE: hosts call this on every decision; a request sent to an unhealthy or
    missing worker would be lost."""
    if not 0 <= decision.worker < len(view.workers):
        raise ValueError(f"router chose worker {decision.worker} of {len(view.workers)}")
    if not view.workers[decision.worker].healthy:
        raise ValueError(f"router chose unhealthy worker {view.workers[decision.worker].url}")
    return decision
