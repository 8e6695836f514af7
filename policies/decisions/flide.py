"""``+decisions=flide``: every question of a request packed with its context into
one sequence, several requests per pass, the budget filled first-fit."""

from __future__ import annotations

from policies.decisions import DecisionsNeeds, Group, Pack, PackView, PendingDecision


class FlidePolicy:
    """Packs a request's context and all its questions into one sequence (one
    exact pass under the segment mask), requests in arrival order.

    * A request whose remaining questions fit the rest of the budget is packed
      whole.
    * One that would fit an empty pass but not the rest of this one waits for
      the next pass (its context would otherwise be computed twice when the host
      cannot hold it); later, smaller requests fill the gap (first-fit), so it
      waits at most one pass: it is the oldest next time.
    * One larger than a whole pass is split: as many questions as fit, in
      order; the rest follow with the context cached when the host holds it
      (``context_cached``), or repeated when it cannot.
    """

    def __init__(self) -> None:
        self.needs = DecisionsNeeds(packed_forward=True)
        """One packed sequence per group."""

    def next_pack(self, view: PackView) -> Pack:
        left = view.token_budget
        groups: list[Group] = []
        for request in view.pending:
            whole = _cost(request, len(request.question_tokens))
            if whole <= left:
                take = len(request.question_tokens)
            elif whole <= view.token_budget and groups:
                continue
            else:
                take = _fitting(request, left)
            if take == 0:
                continue
            groups.append(Group(request.request_id, tuple(i for i, _ in request.question_tokens[:take])))
            left -= _cost(request, take)
        if not groups and view.pending:
            # NOTE: progress: a sequence larger than the whole budget is refused by
            # the host at arrival; should one reach here it runs alone.
            first = view.pending[0]
            groups.append(Group(first.request_id, (first.question_tokens[0][0],)))
        return Pack(tuple(groups))


def _cost(request: PendingDecision, take: int) -> int:
    """Tokens of one packed sequence holding the request's first ``take`` pending questions."""
    context = 0 if request.context_cached else request.context_tokens
    return context + sum(t for _, t in request.question_tokens[:take])


def _fitting(request: PendingDecision, left: int) -> int:
    """How many of the request's questions, in order, fit ``left`` tokens with its context."""
    take = 0
    while take < len(request.question_tokens) and _cost(request, take + 1) <= left:
        take += 1
    return take
