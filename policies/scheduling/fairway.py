"""``+policy=fairway``: cheap-first prefill order with own-prefill-relative aging and a
cap on the delay cheap requests may add to the oldest waiting request.

Rules, in the order they apply (all work and waiting is measured on the host's
prefill-token clock, so every tensor-parallel rank decides the same):

1. **Cheap first, aging relative to own prefill.** A request's work is its
   uncached prompt tokens (at least 1). Its score is
   ``work / (1 + aging_weight * waited / work)``; lower goes first. At arrival
   the score is the work itself (cheapest first); waiting divides it by a
   response ratio, so a short request ages fast and a long one slowly.
2. **Short queue: that is all.** With at most ``queue_threshold`` waiting
   requests the score order is returned as is.
3. **Cap on added delay.** Otherwise each request may be delayed by younger
   requests by at most ``cap_ratio * max(work, cap_floor_tokens)`` prefill
   tokens (its *allowance*). The order is built greedily: before a younger
   candidate is placed ahead of the oldest request not yet placed, the policy
   checks that the oldest's added delay so far, plus the work already placed
   in this pass, plus the candidate's work, stays within the oldest's
   allowance; if not, the oldest is placed first. So under any stream of cheap
   arrivals the oldest request's delay beyond FCFS stays bounded by its
   allowance plus one request's work.

Added delay is ``waited - fcfs_backlog``: the prefill tokens processed since
the request arrived minus the work of the older requests that were waiting
when the policy first saw it (what FCFS would have served first anyway).

NOTE: the policy keeps one integer per waiting request (its FCFS backlog),
updated deterministically from the views; it forgets requests that leave.
"""

from __future__ import annotations

from typing import ClassVar

from policies.scheduling import OrderDecision, QueueView
from policies.views import RequestView


class FairwayPolicy:
    """Fairway prefill ordering (see module docs)."""

    sglang_schedule_policy: ClassVar[str | None] = None

    def __init__(self, queue_threshold: int = 8, aging_weight: float = 1.0,
                 cap_ratio: float = 4.0, cap_floor_tokens: int = 2048) -> None:
        if queue_threshold < 0 or aging_weight < 0 or cap_ratio < 0 or cap_floor_tokens < 0:
            raise ValueError("fairway parameters must be >= 0 "
                             f"(queue_threshold={queue_threshold}, aging_weight={aging_weight}, "
                             f"cap_ratio={cap_ratio}, cap_floor_tokens={cap_floor_tokens})")
        self.queue_threshold = queue_threshold
        self.aging_weight = aging_weight
        self.cap_ratio = cap_ratio
        self.cap_floor_tokens = cap_floor_tokens
        self._fcfs_backlog: dict[str, int] = {}

    @staticmethod
    def work(r: RequestView) -> int:
        """Prefill tokens the request still needs (at least 1)."""
        return max(1, r.num_uncached_tokens)

    def score(self, r: RequestView, clock: int) -> float:
        work = self.work(r)
        waited = max(0, clock - r.arrival_processed_tokens)
        return work / (1.0 + self.aging_weight * waited / work)

    def allowance(self, r: RequestView) -> float:
        """Prefill tokens younger requests may add to ``r``'s wait."""
        return self.cap_ratio * max(self.work(r), self.cap_floor_tokens)

    def added_delay(self, r: RequestView, clock: int) -> int:
        waited = max(0, clock - r.arrival_processed_tokens)
        return max(0, waited - self._fcfs_backlog.get(r.rid, 0))

    def _update_backlog(self, by_arrival: list[RequestView]) -> None:
        backlog, older_work = {}, 0
        for r in by_arrival:
            backlog[r.rid] = self._fcfs_backlog.get(r.rid, older_work)
            older_work += self.work(r)
        self._fcfs_backlog = backlog

    def order(self, queue: QueueView) -> OrderDecision:
        clock = queue.processed_tokens
        by_arrival = sorted(queue.requests, key=lambda r: r.arrival_seq)
        self._update_backlog(by_arrival)
        ranked = sorted(queue.requests, key=lambda r: (self.score(r, clock), r.arrival_seq))
        if len(ranked) <= self.queue_threshold:
            return OrderDecision(tuple(r.rid for r in ranked))

        rank = {r.rid: i for i, r in enumerate(by_arrival)}
        placed_work = _Fenwick(len(by_arrival))  # work placed this pass, by arrival rank
        placed: list[str] = []
        oldest = 0  # arrival rank of the oldest request not yet placed

        def place(i: int) -> None:
            placed.append(by_arrival[i].rid)
            placed_work.add(i, self.work(by_arrival[i]))

        for cand in ranked:
            i = rank[cand.rid]
            if placed_work.placed(i):
                continue
            # NOTE: before a younger request goes ahead, every older request whose
            # allowance it would exceed is placed first, oldest first. Only work
            # of requests younger than the anchor counts as delay added to it.
            while True:
                while placed_work.placed(oldest):
                    oldest += 1
                if oldest == i:
                    break
                anchor = by_arrival[oldest]
                delay = (self.added_delay(anchor, clock) + placed_work.suffix(oldest + 1)
                         + self.work(cand))
                if delay <= self.allowance(anchor):
                    break
                place(oldest)
            place(i)
        return OrderDecision(tuple(placed))


class _Fenwick:
    """Work placed so far, indexed by arrival rank: O(log n) add and suffix sum."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.tree = [0] * (n + 1)
        self.total = 0
        self.is_placed = [False] * n

    def add(self, i: int, value: int) -> None:
        self.is_placed[i] = True
        self.total += value
        i += 1
        while i <= self.n:
            self.tree[i] += value
            i += i & -i

    def placed(self, i: int) -> bool:
        return i < self.n and self.is_placed[i]

    def suffix(self, i: int) -> int:
        """Work placed at ranks >= i."""
        prefix, j = 0, i
        while j > 0:
            prefix += self.tree[j]
            j -= j & -j
        return self.total - prefix
