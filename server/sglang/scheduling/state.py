"""Switchboard's state on SGLang's objects: one record per ``Req``, one per scheduler.

Every seam that must remember something about a request keeps it in the
request's ``RequestState``, attached once under one attribute (``state_of``):
what the scheduler itself tracks (arrival, checks, captured features) as
fields, and what one kind's seam tracks (the gate's verdict, dLLM round
counts, a gap chunk) as that kind's own typed record, one per type
(``kind_record``, ``put_kind_record``), defined next to its seam. Every
per-process part the scheduler subclass drives lives in its ``SchedulerState``
(``scheduler_state``). No other attribute is stamped on SGLang's objects.

Importing this module is light (no torch, no SGLang): seams of every folder
(``scheduling/``, ``cache/``) share it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from server.sglang.scheduling.events import (
        GatesArrival,
        HostsRounds,
        LimitsChunk,
        OnAdmitted,
        OnBatchFinished,
        OnBatchFormed,
        OnQueued,
        OnQueueOrdered,
        WrapsPrefillAdder,
    )

#: The one attribute Switchboard sets on a ``Req`` (and on the scheduler).
STATE_ATTR = "_switchboard"

R = TypeVar("R")


@dataclass(slots=True)
class RequestState:
    """What Switchboard knows of one SGLang ``Req``.

    NOTE: attached on first touch and never replaced: a retracted or
    re-queued request keeps its arrival, its features and its counts."""

    arrival_seq: int | None = None
    """Arrival order in this process (``None``: not arrived yet)."""
    arrival_clock: int = 0
    """The scheduler's prefill-token clock when it arrived."""
    checked: bool = False
    """Its arrival checks (KV fit, admission) ran; a re-queued request is not re-checked."""
    requested_max_new_tokens: int | None = None
    """The client's ``max_tokens`` before SGLang clips it to the memory budget."""
    max_new_recorded: bool = False
    """``requested_max_new_tokens`` was recorded (the client's value may be ``None``)."""
    reported: bool = False
    """Its ``FinishedView`` went to the learning policies (once per request)."""
    features: Any = None
    """Captured features: a device tensor until first read, then a tuple of floats."""
    kinds: dict[type, object] = field(default_factory=dict)
    """Each kind's own record of it, by the record's type (``kind_record``)."""


def state_of(req: Any) -> RequestState:
    """``req``'s state, attached on first touch."""
    state: RequestState | None = getattr(req, STATE_ATTR, None)
    if state is None:
        state = RequestState()
        setattr(req, STATE_ATTR, state)
    return state


def kind_record(req: Any, cls: type[R]) -> R | None:
    """``req``'s record of type ``cls`` (one kind's own), or ``None`` before it was put.

    NOTE: a request that never touched a seam has no ``RequestState`` yet; reading
    does not attach one."""
    state: RequestState | None = getattr(req, STATE_ATTR, None)
    found = None if state is None else state.kinds.get(cls)
    return found if isinstance(found, cls) else None


def own_kind_record(req: Any, cls: type[R]) -> R:
    """``req``'s record of type ``cls``, a default ``cls()`` put first if it has none."""
    record = kind_record(req, cls)
    if record is None:
        record = cls()
        put_kind_record(req, record)
    return record


def put_kind_record(req: Any, record: object) -> None:
    """Keep ``record`` as ``req``'s record of its type (replacing an earlier one)."""
    state_of(req).kinds[type(record)] = record


@dataclass
class SchedulerState:
    """What Switchboard keeps for one SGLang scheduler (one per process).

    NOTE: set once, right after SGLang's ``init_schedule_policy``
    (``scheduler.install_seams``); the event lists are fixed from then on."""

    seams: list[Any] = field(default_factory=list)
    """Every subscriber the chosen kinds' bindings built here, in binding order."""
    gate: GatesArrival | None = None
    """The arrival gate (at most one; ``None``: every request that fits is admitted)."""
    rounds: HostsRounds | None = None
    """The dLLM round host (at most one; ``None``: SGLang's own rounds)."""
    on_queued: list[OnQueued] = field(default_factory=list)
    on_admitted: list[OnAdmitted] = field(default_factory=list)
    on_batch_formed: list[OnBatchFormed] = field(default_factory=list)
    on_batch_finished: list[OnBatchFinished] = field(default_factory=list)
    adders: list[WrapsPrefillAdder] = field(default_factory=list)
    chunk_limits: list[LimitsChunk] = field(default_factory=list)
    on_queue_ordered: list[OnQueueOrdered] = field(default_factory=list)
    """The subscribers of each event (``events.py``)."""
    prefill_tokens: int = 0
    """Switchboard's prefill-token clock (SGLang's own counter also grows on decode steps)."""


def scheduler_state(scheduler: Any) -> SchedulerState:
    """The scheduler's state (set by ``install_seams``)."""
    state: SchedulerState = getattr(scheduler, STATE_ATTR)
    return state
