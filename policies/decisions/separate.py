"""``+decisions=separate``: SGLang's own ``/v1/decisions``, one ``context +
question`` prompt per question, as its scheduler orders them (the baseline)."""

from __future__ import annotations

from policies.decisions import DecisionsNeeds, Group, Pack, PackView, PendingDecision


class SeparatePolicy:
    """One sequence per question, the prefill budget filled in queue order.

    On the server this is SGLang's own route, untouched (``needs.packed_forward``
    is off; ``in_batch_prefix_caching`` only sets ``--schedule-policy lpm``); this
    object is its twin in the simulator, modelling SGLang 0.5.23's two orders:

    * ``fcfs`` (``in_batch_prefix_caching=False``): prompts in arrival order
      while they fit; every prompt in a pass computes its context again, unless
      an earlier pass left it cached (contexts enter the tree when a request
      finishes).
    * ``lpm`` (``True``): prompts whose context is cached first (longest prefix
      match); then the first prompt of each context not cached; then the other
      prompts of those contexts, which SGLang's in-batch prefix caching only
      *deprioritises* (``schedule_policy._sort_by_longest_prefix``): nothing
      in the prefill walk holds them back, so while the budget lasts they join
      the same pass and compute the context again.

    NOTE: the twin stops at the first prompt that does not fit; SGLang would
    chunk it into the pass. The tokens computed are the same; only when the
    last prompt's tokens finish differs. SGLang's ``lpm`` turns into ``fcfs``
    above 128 queued requests; the twin does not.
    """

    def __init__(self, in_batch_prefix_caching: bool = False) -> None:
        self.in_batch_prefix_caching = in_batch_prefix_caching
        """Model (and on the server, set) SGLang's ``lpm`` order with in-batch
        prefix caching; ``False``: its default ``fcfs``."""
        self.needs = DecisionsNeeds(packed_forward=False,
                                    schedule_policy="lpm" if in_batch_prefix_caching else None)
        """Unpacked prompts; the schedule policy the modelled order assumes."""

    def next_pack(self, view: PackView) -> Pack:
        left = view.token_budget
        chosen: dict[str, list[int]] = {}
        for request, (i, tokens) in self._queue(view):
            cost = tokens + (0 if request.context_cached else request.context_tokens)
            if cost > left:
                break
            chosen.setdefault(request.request_id, []).append(i)
            left -= cost
        if not chosen and view.pending:
            # NOTE: progress (a prompt over the whole budget is refused at arrival).
            first = view.pending[0]
            chosen[first.request_id] = [first.question_tokens[0][0]]
        order = [r.request_id for r in view.pending if r.request_id in chosen]
        return Pack(tuple(Group(rid, tuple(sorted(chosen[rid]))) for rid in order))

    def _queue(self, view: PackView) -> list[tuple[PendingDecision, tuple[int, int]]]:
        """Every pending prompt in the order SGLang's walk meets them."""
        prompts = [(r, q) for r in view.pending for q in r.question_tokens]
        if not self.in_batch_prefix_caching:
            return prompts
        heads = {r.request_id: r.question_tokens[0] for r in view.pending}

        def rank(item: tuple[PendingDecision, tuple[int, int]]) -> int:
            request, question = item
            if request.context_cached:
                return 0
            return 1 if heads[request.request_id] == question else 2

        return sorted(prompts, key=rank)  # stable: arrival order within each rank
