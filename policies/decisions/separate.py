"""``+decisions=separate``: SGLang's own ``/v1/decisions``, one ``context +
question`` prompt per question, as its scheduler orders them (the baseline)."""

from __future__ import annotations

from policies.decisions import DecisionsNeeds, Group, Pack, PackView, PendingDecision


class SeparatePolicy:
    """One sequence per question, the prefill budget filled in queue order.

    On the server this is SGLang's own route, untouched (``needs.packed_forward``
    is off; ``in_batch_prefix_caching`` only sets ``--schedule-policy lpm``); this
    object is its twin in the simulator, modelling the two orders:

    * ``fcfs`` (``in_batch_prefix_caching=False``): questions in arrival order
      while they fit; every prompt of a request in the same pass computes the
      context again, unless an earlier pass left it cached.
    * ``lpm`` (``True``): requests whose context is cached go first (longest
      prefix match), and of a request whose context is not cached only its
      first question runs in a pass (SGLang's in-batch prefix caching
      deprioritises the prompts sharing its prefix); the rest hit the cache next.

    NOTE: the twin stops at the first prompt that does not fit; SGLang would
    chunk it into the pass. The tokens computed are the same; only when the
    last prompt's tokens finish differs.
    """

    def __init__(self, in_batch_prefix_caching: bool = False) -> None:
        self.in_batch_prefix_caching = in_batch_prefix_caching
        """Model (and on the server, set) SGLang's ``lpm`` order with in-batch
        prefix caching; ``False``: its default ``fcfs``."""
        self.needs = DecisionsNeeds(packed_forward=False,
                                    schedule_policy="lpm" if in_batch_prefix_caching else None)
        """Unpacked prompts; the schedule policy the modelled order assumes."""

    def next_pack(self, view: PackView) -> Pack:
        order = list(view.pending)
        if self.in_batch_prefix_caching:
            order.sort(key=lambda r: not r.context_cached)  # stable: arrival order within each
        left = view.token_budget
        groups: list[Group] = []
        for request in order:
            take, used, full = self._questions(request, left)
            if take:
                groups.append(Group(request.request_id, take))
                left -= used
            if full:
                break
        if not groups and view.pending:
            # NOTE: progress (a prompt over the whole budget is refused at arrival).
            first = view.pending[0]
            groups.append(Group(first.request_id, (first.question_tokens[0][0],)))
        return Pack(tuple(groups))

    def _questions(self, request: PendingDecision, left: int) -> tuple[tuple[int, ...], int, bool]:
        """The request's questions that join this pass, their tokens, and whether
        a prompt did not fit (the pass is full: in queue order, nothing after it
        joins)."""
        one_only = self.in_batch_prefix_caching and not request.context_cached
        context = 0 if request.context_cached else request.context_tokens
        take: list[int] = []
        used = 0
        for i, t in request.question_tokens:
            if used + context + t > left:
                return tuple(take), used, True
            take.append(i)
            used += context + t
            if one_only:
                break
        return tuple(take), used, False
