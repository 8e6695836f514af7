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

import numpy as np

from policies.scheduling import OrderDecision, QueueView
from policies.views import RequestView


class FairwayPolicy:
    """Fairway prefill ordering (see module docs)."""

    sglang_schedule_policy: ClassVar[str | None] = None

    # NOTE: defaults = conf/policy/fairway.yaml (chosen by bench/scripts/fairway.py)
    def __init__(self, queue_threshold: int = 32, aging_weight: float = 0.0,
                 cap_ratio: float = 8.0, cap_floor_tokens: int = 0) -> None:
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

    def order(self, queue: QueueView) -> OrderDecision:
        reqs = queue.requests
        n = len(reqs)
        if n == 0:
            return OrderDecision(())
        # NOTE: vectorized (numpy) so a step over 10k waiting requests stays in
        # milliseconds; the semantics are those of the scalar methods above.
        clock = float(queue.processed_tokens)
        work = np.fromiter((r.num_input_tokens - r.num_cached_tokens for r in reqs), float, n)
        np.maximum(work, 1.0, out=work)
        waited = np.maximum(clock - np.fromiter((r.arrival_processed_tokens for r in reqs), float, n), 0.0)
        seq = np.fromiter((r.arrival_seq for r in reqs), np.int64, n)
        score = work / (1.0 + self.aging_weight * waited / work)
        ranked = np.lexsort((seq, score))  # by score, ties by arrival
        by_arrival = np.argsort(seq, kind="stable")
        rids = [r.rid for r in reqs]
        self._update_backlog(rids, by_arrival, work)
        if n <= self.queue_threshold:
            return OrderDecision(tuple(rids[i] for i in ranked.tolist()))

        backlog = np.fromiter((self._fcfs_backlog[rid] for rid in rids), float, n)
        added = np.maximum(waited - backlog, 0.0)
        budget = self.cap_ratio * np.maximum(work, self.cap_floor_tokens) - added
        return OrderDecision(tuple(rids[i] for i in self._place(ranked, by_arrival, work, budget)))

    def _update_backlog(self, rids: list[str], by_arrival: np.ndarray, work: np.ndarray) -> None:
        """FCFS backlog of newly seen requests: the work of the older ones waiting now."""
        older = np.concatenate(([0.0], np.cumsum(work[by_arrival])[:-1]))
        old = self._fcfs_backlog
        self._fcfs_backlog = {rids[i]: old.get(rids[i], older[pos])
                              for pos, i in enumerate(by_arrival.tolist())}

    @staticmethod
    def _place(ranked: np.ndarray, by_arrival: np.ndarray, work: np.ndarray,
               budget: np.ndarray) -> list[int]:
        """Greedy placement: score order, but an older request goes first as soon
        as a younger one would exceed its remaining allowance (``budget``)."""
        # NOTE: when the anchor is the oldest request not yet placed, every older
        # request is placed, so the work placed ahead of it by *younger* requests
        # is the total placed minus the work of all older ones (a prefix sum):
        # O(1) per check, O(n) per pass after the sort.
        arrival = by_arrival.tolist()
        w = work.tolist()
        b = budget.tolist()
        older_work = np.concatenate(([0.0], np.cumsum(work[by_arrival])[:-1])).tolist()
        pos_of = [0] * len(arrival)
        for pos, i in enumerate(arrival):
            pos_of[i] = pos
        placed_flags = [False] * len(arrival)
        out: list[int] = []
        placed_work = 0.0
        oldest = 0  # arrival position of the oldest request not yet placed
        for i in ranked.tolist():
            p = pos_of[i]
            if placed_flags[p]:
                continue
            while True:
                while placed_flags[oldest]:
                    oldest += 1
                a = arrival[oldest]
                if oldest == p or placed_work - older_work[oldest] + w[i] <= b[a]:
                    break
                placed_flags[oldest] = True
                out.append(a)
                placed_work += w[a]
            placed_flags[p] = True
            out.append(i)
            placed_work += w[i]
        return out
