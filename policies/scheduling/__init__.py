"""Scheduling: the order in which waiting requests are offered to prefill.

Contract (the host's side):
  * Once per scheduling pass the host calls ``policy.order(queue)`` with every
    waiting request, matched against the prefix cache just before.
  * The host then walks the returned order and admits requests into the next
    prefill batch until its token budget or batch limit stops it (it stops at
    the first request that does not fit; it never skips ahead).

Contract (the policy's side):
  * ``order`` returns a permutation of ``queue.requests`` rids: every rid
    exactly once, nothing else. The host rejects anything else loudly.
  * It is deterministic given the view (ties broken by ``arrival_seq``), so all
    tensor-parallel ranks agree.
  * Positions beyond the head the host can admit this pass (``admit_limit``,
    ``prefill_budget_tokens``) may follow a cheaper rule.

Large queues: a policy that can decide from numbers alone also implements
``rank(QueueColumns)`` (``policies.scheduling.columns``); the server then keeps
the queue as columns across passes and never builds per-request views.

Diffusion LMs: a policy whose ``needs.rounds`` is set orders a diffusion LM's
block rounds instead: its own contract (``policies.scheduling.rounds``: the
``RoundsPolicy`` face, ``RoundView``, ``RoundsNeeds``), called once per round
with waiting and admitted requests together. One option may have both faces;
the served model picks which one a host calls.

What a policy needs from its host, or lets it skip, it declares in one
``SchedulingNeeds`` (its ``needs`` attribute); hosts read nothing else off a
policy object.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from policies.views import RequestView


@dataclass(frozen=True)
class SchedulingNeeds:
    """What a scheduling policy needs from its host, or lets it skip.

    NOTE: the one place a host learns a policy's optional needs; a policy
    states them as its ``needs`` attribute (class-level unless they depend on
    its parameters)."""

    sglang_native: str | None = None
    """The SGLang ``--schedule-policy`` this policy reproduces: the server runs
    SGLang's own implementation instead of this object, the simulator runs
    this object (tests check the two agree). ``None``: the policy runs through
    Switchboard's seam."""
    cache_hits: bool = True
    """The order reads ``RequestView.num_cached_tokens``; ``False`` lets the
    server skip matching waiting requests against the prefix cache (the field
    stays 0)."""
    prefix_path: bool = False
    """The order reads ``RequestView.prefix_path``; hosts walk the tree for
    it only when asked (it costs time)."""
    prompt_embedding: bool = False
    """The host gives each request, when it arrives and before it is first
    ranked, the mean of the serving model's input token embeddings over its
    prompt (layer 0's residual stream, pooled) as ``RequestView.features``."""
    hidden_state_layer: int | None = None
    """Decoder layer whose input hidden state the host captures at each
    request's last prompt token (``RequestView.features``), available only
    after the request's prefill; ``None``: no capture (and no cost)."""
    queue: bool = True
    """The policy orders an autoregressive model's prefill queue (the contract
    above, ``SchedulingPolicy.order``); ``False``: it orders only a diffusion
    LM's rounds, and hosts refuse it for an autoregressive model, naming the
    reason."""
    rounds: RoundsNeeds | None = None
    """The policy orders a diffusion LM's block rounds (the contract of
    ``policies.scheduling.rounds``), and needs this from the host there;
    ``None``: hosts refuse it for a diffusion LM. NOTE: every round field
    lives in ``RoundsNeeds``; an order of an autoregressive queue only
    carries none."""


@dataclass(frozen=True)
class RoundsNeeds:
    """What an order of a diffusion LM's block rounds needs from its host
    (``SchedulingNeeds.rounds``; the contract: ``policies.scheduling.rounds``).

    NOTE: stated once, by the option (its YAML's parameters); both hosts read
    the round's shape through ``rounds.round_shape``."""

    slots: int | None = None
    """Requests that hold a slot (and their KV) at once; the server sets
    SGLang's ``max_running_requests`` to it. ``None``: the host's setting."""
    round_blocks: int | None = None
    """Blocks one round takes at most (the round's capacity: one forward over
    that many blocks); ``None``: one per slot, SGLang's budget."""
    denoise_hidden_state: bool = False
    """After a request's first denoising round the host gives the mean of the
    final-layer hidden states over that round's block as
    ``RequestView.features`` (``None`` before)."""


@dataclass(frozen=True, slots=True)
class QueueView:
    """The waiting queue at one scheduling pass."""

    requests: tuple[RequestView, ...]
    """Waiting requests in the host's current queue order."""
    now: float = 0.0
    """Host time of this pass, in seconds."""
    processed_tokens: int = 0
    """Prefill tokens the host has processed since it started (a token clock)."""
    num_running: int = 0
    """Requests currently decoding."""
    admit_limit: int | None = None
    """At most this many waiting requests can be admitted this pass (``None``:
    no bound known). With ``prefill_budget_tokens`` it bounds the *head* of
    the order the host will use (see ``policies.scheduling.columns``)."""
    prefill_budget_tokens: float = math.inf
    """The host stops admitting once this many uncached prefill tokens are
    taken this pass (``inf``: no bound known)."""


@dataclass(frozen=True, slots=True)
class OrderDecision:
    """A scheduling decision: waiting requests, best first."""

    order: tuple[str, ...]
    """Request ids, a permutation of the queue's rids."""


@runtime_checkable
class SchedulingOption(Protocol):
    """Any ``+policy`` option (the kind's contract): an order of an autoregressive
    model's queue (``SchedulingPolicy``), of a diffusion LM's block rounds
    (``rounds.RoundsPolicy``), or both, as its ``needs`` say (``queue``,
    ``rounds``); ``rounds.missing_face`` checks the two agree."""

    needs: SchedulingNeeds
    """What the policy needs from its host (``SchedulingNeeds``)."""


@runtime_checkable
class SchedulingPolicy(Protocol):
    """Orders the waiting queue for the next prefill batch (see module docs)."""

    needs: SchedulingNeeds
    """What the policy needs from its host (``SchedulingNeeds``)."""

    def order(self, queue: QueueView) -> OrderDecision:
        """Return every waiting request's rid, best first."""
        ...


def ordered_by(queue: QueueView, key: Callable[[RequestView], Any]) -> OrderDecision:
    """An ``OrderDecision`` sorting ``queue.requests`` by ``key`` (stable)."""
    return OrderDecision(tuple(r.rid for r in sorted(queue.requests, key=key)))


def check_permutation(queue: QueueView, decision: OrderDecision) -> None:
    """Raise ``ValueError`` unless ``decision`` is a permutation of the queue.

    NOTE: hosts call this on every decision; a policy that drops or invents a
    request would otherwise lose or duplicate work silently.
    """
    check_rids([r.rid for r in queue.requests], decision)


def check_rids(rids: list[str], decision: OrderDecision) -> None:
    """Raise ``ValueError`` unless ``decision`` is a permutation of ``rids`` (``check_permutation``)."""
    expected = set(rids)
    # NOTE: rids are unique in a queue, so equal length + equal sets = a permutation
    if len(decision.order) != len(rids) or set(decision.order) != expected:
        missing = set(expected) - set(decision.order)
        extra = set(decision.order) - set(expected)
        raise ValueError(
            f"scheduling decision is not a permutation of the queue "
            f"(missing={sorted(missing)[:5]}, unknown={sorted(extra)[:5]}, "
            f"len {len(decision.order)} vs {len(expected)})"
        )
