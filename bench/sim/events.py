"""The simulator's events: what a kind's simulator binding subscribes to.

They mirror the server's (``server/sglang/scheduling/events.py``): the
simulator loop (``engine.Simulator``) is a fixed dispatcher, and each chosen
kind's binding puts *seams* on its record (``SimParts.seams``); each seam
subscribes to every event whose face it has (these Protocols, checked with
``isinstance``), in binding order:

============== ===================================== ============================
event          the simulator (the server's hop)      face
============== ===================================== ============================
arrival        ``Simulator._arrive`` (5), first       ``TagsArrival``, then
               what the trace leaves out, then the    ``GatesArrival`` (one)
               gate
queue order    ``WaitingQueue.sort`` (6)             ``SimParts.order``
prefill walk   ``Simulator._prefill_pass`` (7)        ``FiltersWalk``
batch          before each forward (9)                ``OnBatchFormed``
decode step    ``Simulator._run_decode`` (10)         ``DraftsDecode`` (one)
finished       ``Simulator._final``                   ``SimParts.observers``
                                                      (``ObservesFinished``)
counters       the run's meta                         ``CountsWork``
dLLM round     ``bench.sim.dllm`` (6d)                ``SimParts.rounds``
============== ===================================== ============================

The server's events without a face here are ones whose seam the simulator
models as host behaviour, the same for every option that asks: *queued* and
*admitted* (the server counts prompt words and captures prompt embeddings
there; a simulated request has its lengths from the trace and its features
from the length signal, ``sim.length_signal_*``; ``TagsArrival`` adds the
rest), *queue ordered* (SGLang's waiting-prefix
refresh: ``WaitingQueue`` runs it where the eviction order's
``needs.refresh_waiting`` asks), *chunk limit* and *batch finished* (the gap
cache's chunk bound and recompute counter: the simulator's tree holds gaps for
any order and for SGLang's own host tier, and ``engine.Simulator`` recomputes a
gap in the request's first prefill pass and counts it). A kind that needs one
of them in the simulator adds its face here and raises it once in
``engine.py`` (docs/adding-a-kind.md).

NOTE: faces are told apart by their method names (``isinstance`` on a
runtime-checkable Protocol checks names only), so no two faces share one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from bench.sim.request import SimRequest


@runtime_checkable
class TagsArrival(Protocol):
    """Completes a new request with what the trace does not carry (e.g. the adapter it names)."""

    def tag(self, r: SimRequest) -> None:
        """``r`` arrived (its output already clipped), before the gate decides on it."""
        ...


@runtime_checkable
class GatesArrival(Protocol):
    """Decides on each new request before it queues (at most one per simulator)."""

    num_deferred: int
    """Waiting requests it deferred (they wait sorted last; the walk stops at them)."""

    def on_arrival(self, host: Any, r: SimRequest) -> str | None:
        """The rejection reason, or ``None``: ``r`` may queue (deferred or not)."""
        ...

    def revisit(self, host: Any, waiting: list[SimRequest]) -> list[tuple[SimRequest, str]]:
        """Offer deferred requests again (each prefill pass); return those now rejected."""
        ...


@runtime_checkable
class FiltersWalk(Protocol):
    """Skips waiting requests in the prefill walk (SGLang walks on past them)."""

    def walk_started(self, running: Iterable[SimRequest], batch: Iterable[SimRequest]) -> None:
        """A walk starts over the queue; ``batch``: what the chunked request already added."""
        ...

    def admits(self, r: SimRequest) -> bool:
        """Whether ``r`` may join this pass's batch (``False``: skipped, the walk goes on)."""
        ...

    def walked(self, r: SimRequest) -> None:
        """``r`` joined this pass's batch."""
        ...


@runtime_checkable
class OnBatchFormed(Protocol):
    """Told before each forward batch runs."""

    def batch_formed(self, requests: Sequence[SimRequest], prefill: bool) -> float:
        """``requests`` are about to run (``prefill``: an extend batch); seconds the
        host spends before the forward on their behalf (0: none)."""
        ...


@runtime_checkable
class DraftsDecode(Protocol):
    """Speculates in each decode step (at most one per simulator)."""

    def plan_step(self, batch: Sequence[SimRequest]) -> tuple[int, float]:
        """``(draft length, drafting seconds)`` of the decode step ``batch`` is about
        to run (the verify's own time is the cost model's ``verify_time``)."""
        ...

    def step_verified(self, batch: Sequence[SimRequest], draft: int, step_s: float) -> list[int]:
        """The verify of length ``draft`` took ``step_s`` (drafting included): the
        drafts each request of ``batch`` accepted (the bonus token excluded)."""
        ...


@runtime_checkable
class CountsWork(Protocol):
    """Reports counters for the run's meta."""

    def counters(self) -> dict[str, int]:
        """Counter name -> value so far."""
        ...


def one(seams: Sequence[object], face: type, event: str) -> Any:
    """The single seam with ``face``, or ``None``.

    NOTE: an event only one seam may own (the gate): a second is a binding
    bug, refused when the simulator is built."""
    found = [s for s in seams if isinstance(s, face)]
    if len(found) > 1:
        raise ValueError(f"two seams own the {event} event: {', '.join(type(s).__name__ for s in found)}")
    return found[0] if found else None


def having(seams: Sequence[object], face: type) -> list[Any]:
    """The seams with ``face``, in binding order."""
    return [s for s in seams if isinstance(s, face)]
