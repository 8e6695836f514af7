"""Shared-context decisions: what goes into the next forward pass.

A *decision call* (SGLang's ``/v1/decisions``) is one shared context (the
rendered input) and ``N`` short questions about it, each answered by the
distribution over its labels, read at the question's last token. The decision
is which requests' questions the next forward pass computes, within a token
budget; how they are laid out is the host's mechanism, chosen by the policy's
needs:

* ``packed_forward=False`` (SGLang's own ``/v1/decisions``): every question is
  its own sequence, ``context + question``; two sequences of one request in the
  same pass both compute the context unless it is already cached.
* ``packed_forward=True`` (Flide): each group is ONE sequence, the context
  followed by its questions; a question attends to the context and to itself
  only (``kernels/segment_mask``), its positions continue from the context's
  end, and a recurrent layer restarts it from the state at the context's end.
  The answer equals computing ``context + question`` alone, exactly.

Contract (the host's side):
  * The host asks ``next_pack`` whenever it can start a pass and questions are
    pending, with every pending question of every request it holds, and runs
    exactly the pack answered; the rest stay pending for a later ask.
  * ``PendingDecision.context_cached`` is what the host knows: the context was
    computed by an earlier pass and its state is still held (a prefix-cache hit
    the host can rely on). A host that cannot hold it (a recurrent model whose
    state is cached only at a request's end) always says ``False``.
  * NOTE: a pack's tokens (``pack_tokens``) never exceed ``token_budget``, and
    no sequence is split across passes (a packed sequence is never chunked):
    the host refuses, before allocating anything, a request one of whose
    questions cannot fit with its context (``longest_sequence`` > budget).

Contract (the policy's side): ``next_pack`` is deterministic given the view (no
clocks: ``now`` is the host's), answers a non-empty pack when anything is
pending, names each pending question at most once, and only questions that are
pending (``check_pack``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class PendingDecision:
    """One request's questions not yet computed."""

    request_id: str
    """The host's id of the request."""
    context_tokens: int
    """Tokens of the shared context (the rendered prefix every question shares)."""
    question_tokens: tuple[tuple[int, int], ...]
    """``(question index, tokens)`` of each pending question, by index; the
    tokens are the question's rendered suffix, up to its readout token."""
    arrived: float
    """When the request arrived, on the host's clock (seconds)."""
    context_cached: bool = False
    """The context's state is held from an earlier pass (see module docs)."""

    def __post_init__(self) -> None:
        if self.context_tokens < 1:
            raise ValueError(f"request {self.request_id}: a context needs at least 1 token")
        indices = [i for i, _ in self.question_tokens]
        if indices != sorted(set(indices)) or any(t < 1 for _, t in self.question_tokens):
            raise ValueError(f"request {self.request_id}: questions need distinct ascending indices "
                             f"and at least 1 token each, got {self.question_tokens}")

    def tokens_of(self, index: int) -> int:
        """Tokens of pending question ``index`` (``KeyError`` if it is not pending)."""
        for i, t in self.question_tokens:
            if i == index:
                return t
        raise KeyError(f"question {index} of request {self.request_id} is not pending")


@dataclass(frozen=True, slots=True)
class PackView:
    """What the host holds when a pass can start."""

    pending: tuple[PendingDecision, ...]
    """Requests with pending questions, in arrival order."""
    token_budget: int
    """The most tokens one pass may compute (the host's prefill budget)."""
    now: float
    """The host's clock (seconds)."""


@dataclass(frozen=True, slots=True)
class Group:
    """Some questions of one request, computed in this pass."""

    request_id: str
    """Which request."""
    questions: tuple[int, ...]
    """Question indices, ascending (one sequence when packed; one sequence each
    when not)."""


@dataclass(frozen=True, slots=True)
class Pack:
    """The next forward pass: its groups, in the order the host lays them out."""

    groups: tuple[Group, ...]


@dataclass(frozen=True)
class DecisionsNeeds:
    """What a decisions policy needs from its host.

    NOTE: the one place a host learns a policy's optional needs."""

    packed_forward: bool = False
    """Each group is one packed sequence (context, then its questions, under the
    segment mask); ``False``: one ``context + question`` sequence per question
    (SGLang's own ``/v1/decisions``)."""
    schedule_policy: str | None = None
    """SGLang's ``--schedule-policy`` the policy's behaviour assumes (``lpm``:
    in-batch prefix caching, the context computed once per pass); ``None``:
    SGLang's default (``fcfs``)."""


@runtime_checkable
class DecisionsPolicy(Protocol):
    """Chooses which pending questions the next forward pass computes."""

    needs: DecisionsNeeds
    """What the policy needs from its host (``DecisionsNeeds``)."""

    def next_pack(self, view: PackView) -> Pack:
        """The next pass (see module docs)."""
        ...


def sequence_tokens(request: PendingDecision, questions: tuple[int, ...], packed: bool) -> int:
    """Tokens a pass computes for one group: the context unless cached (once per
    sequence: once packed, once per question otherwise) plus the questions."""
    context = 0 if request.context_cached else request.context_tokens
    body = sum(request.tokens_of(i) for i in questions)
    return context + body if packed else context * len(questions) + body


def longest_sequence(request: PendingDecision) -> int:
    """The longest sequence the request can need in one pass, however it is
    split: its context plus its longest question (what must fit the budget)."""
    return request.context_tokens + max((t for _, t in request.question_tokens), default=0)


def pack_tokens(view: PackView, pack: Pack, packed: bool) -> int:
    """Tokens the pass ``pack`` computes."""
    by_id = {r.request_id: r for r in view.pending}
    return sum(sequence_tokens(by_id[g.request_id], g.questions, packed) for g in pack.groups)


def check_pack(view: PackView, pack: Pack, packed: bool) -> None:
    """Raise ``ValueError`` unless ``pack`` is a valid answer to ``view`` (hosts
    call it on every decision): non-empty when anything is pending, pending
    questions only, each at most once, within the budget (a pack of one
    sequence may exceed it only if that sequence alone does, which the host
    refuses at arrival)."""
    by_id = {r.request_id: r for r in view.pending}
    if view.pending and not pack.groups:
        raise ValueError("an empty pack while questions are pending")
    seen: set[tuple[str, int]] = set()
    for g in pack.groups:
        request = by_id.get(g.request_id)
        if request is None:
            raise ValueError(f"pack names request {g.request_id!r}, which is not pending")
        if not g.questions or list(g.questions) != sorted(set(g.questions)):
            raise ValueError(f"group of {g.request_id!r}: questions must be non-empty and ascending, "
                             f"got {g.questions}")
        for i in g.questions:
            request.tokens_of(i)
            if (g.request_id, i) in seen:
                raise ValueError(f"question {i} of {g.request_id!r} is packed twice")
            seen.add((g.request_id, i))
    tokens = pack_tokens(view, pack, packed)
    single = len(pack.groups) == 1 and (packed or len(pack.groups[0].questions) == 1)
    if tokens > view.token_budget and not single:
        raise ValueError(f"pack of {tokens} tokens exceeds the budget of {view.token_budget}")
