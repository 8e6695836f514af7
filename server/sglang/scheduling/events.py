"""The scheduler's events: what a seam subscribes to inside SGLang's scheduler.

The scheduler subclass (``scheduler.py``) is a fixed dispatcher. Each chosen
kind's server binding hands it *seam factories* (``SchedulerParts.seams``),
called once per scheduler right after SGLang's ``init_schedule_policy``; the
object each returns subscribes to every event whose face it has (these
Protocols, checked with ``isinstance``), in binding order:

============== ======================================= ==========================
event          SGLang method (hop of docs/lifecycle)   face
============== ======================================= ==========================
queued         ``_add_request_to_queue`` (5)           ``OnQueued``
arrival        the same, first time only (5)           ``GatesArrival`` (one)
admitted       the same, once admitted (5)             ``OnAdmitted``
queue order    ``SchedulePolicy.calc_priority`` (6)    ``SchedulerParts.order``;
                                                       the gate's ``revisit`` and
                                                       ``holds`` (deferred last)
queue ordered  the end of ``calc_priority`` (6)        ``OnQueueOrdered``
chunk limit    ``shortest_prefill_chunk_limit`` (6)    ``LimitsChunk``
prefill walk   ``get_prefill_adder_class`` (7)         ``WrapsPrefillAdder``
batch          ``run_batch`` (before, after) (9)       ``OnBatchFormed``,
                                                       ``OnBatchFinished``
dLLM round     ``_fetch_waiting_reqs``,                ``HostsRounds`` (one)
               ``_process_dllm_batches``,
               ``get_new_batch_dllm`` (6d)
finished       the output streamer, ``send_abort_output`` the policies (``ObservesFinished``)
============== ======================================= ==========================

Importing this module is light (no torch, no SGLang).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class OnQueued(Protocol):
    """Told each time a request joins the waiting queue (a retracted one again)."""

    def on_queued(self, req: Any) -> None:
        """``req`` joins the queue now."""
        ...


@runtime_checkable
class GatesArrival(Protocol):
    """Decides on each new request before any KV allocation (at most one per scheduler)."""

    def on_arrival(self, req: Any) -> bool:
        """``True``: ``req`` may join the queue; ``False``: it was answered already."""
        ...

    def revisit(self, waiting_queue: list[Any]) -> None:
        """Offer deferred requests again (each prefill pass)."""
        ...

    def holds(self, req: Any) -> bool:
        """Whether ``req`` waits deferred: the queue order puts it last, the walk stops at it."""
        ...


@runtime_checkable
class OnQueueOrdered(Protocol):
    """Told after each queue order, in the order the prefill walk will take."""

    def queue_ordered(self, waiting_queue: list[Any], matched: bool) -> None:
        """``waiting_queue`` is in its final order for this pass; ``matched``: this
        pass prefix-matched every waiting request against the cache (SGLang's
        ``waiting_queue_prefix_matched``)."""
        ...


@runtime_checkable
class LimitsChunk(Protocol):
    """Bounds the next chunk of the request SGLang is prefilling in chunks."""

    def chunk_limit(self, tree_cache: Any, chunked_req: Any) -> int | None:
        """Tokens the next chunk of ``chunked_req`` may take at most (``None``: no bound)."""
        ...


@runtime_checkable
class OnAdmitted(Protocol):
    """Told once per request the arrival checks admitted, before it is first ranked."""

    def on_admitted(self, req: Any) -> None:
        """``req`` was admitted."""
        ...


@runtime_checkable
class WrapsPrefillAdder(Protocol):
    """Wraps SGLang's ``PrefillAdder`` class (the prefill walk)."""

    def adder_class(self, base: type) -> type:
        """The adder class to use instead of ``base`` (a subclass of it)."""
        ...


@runtime_checkable
class OnBatchFormed(Protocol):
    """Told before each batch SGLang runs."""

    def batch_formed(self, batch: Any, prefill: bool) -> None:
        """``batch`` is about to run (``prefill``: an extend batch, not a verify pass)."""
        ...


@runtime_checkable
class OnBatchFinished(Protocol):
    """Told after each batch SGLang ran."""

    def batch_finished(self, batch: Any, prefill: bool) -> None:
        """``batch`` ran (its forward pass is done)."""
        ...


@runtime_checkable
class HostsRounds(Protocol):
    """Runs a diffusion LM's block rounds instead of SGLang's own walk (at most one)."""

    def fetch(self) -> None:
        """Fill free slots from the waiting queue, in the policy's order."""
        ...

    def walk(self, adder: Any, running_batch: Any) -> Any:
        """Add this round's blocks to ``adder``; SGLang's ``_process_dllm_batches`` result."""
        ...

    def after_round(self, reqs: list[Any]) -> None:
        """The round of ``reqs`` was formed."""
        ...


def one(subscribers: list[Any], face: type, event: str) -> Any:
    """The single subscriber with ``face``, or ``None``.

    NOTE: an event only one seam may own (the gate, the round host): a
    second is a host bug, refused at scheduler start-up."""
    found = [s for s in subscribers if isinstance(s, face)]
    if len(found) > 1:
        raise RuntimeError(f"two seams own the {event} event: {', '.join(type(s).__name__ for s in found)}")
    return found[0] if found else None
