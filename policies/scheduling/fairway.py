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

NOTE: the policy keeps one number per waiting request (its FCFS backlog), keyed
by ``arrival_seq`` and updated deterministically from each pass's queue; it
forgets requests that leave. It ranks columns (``rank``); only the best few
scores are sorted (a partition finds them), the greedy placement of rule 3
runs only as far as the head the host can admit this pass, and the rest of
the queue keeps the host's order.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from policies.scheduling import SchedulingNeeds
from policies.scheduling.columns import ColumnarOrder, QueueColumns
from policies.views import RequestView


class FairwayPolicy(ColumnarOrder):
    """Fairway prefill ordering (see module docs)."""

    needs: ClassVar[SchedulingNeeds] = SchedulingNeeds()

    # NOTE: defaults = conf/policy/fairway.yaml (chosen by bench/scripts/fairway.py)
    def __init__(self, queue_threshold: int = 32, aging_weight: float = 0.0,
                 cap_ratio: float = 4.0, cap_floor_tokens: int = 0) -> None:
        if queue_threshold < 0 or aging_weight < 0 or cap_ratio < 0 or cap_floor_tokens < 0:
            raise ValueError("fairway parameters must be >= 0 "
                             f"(queue_threshold={queue_threshold}, aging_weight={aging_weight}, "
                             f"cap_ratio={cap_ratio}, cap_floor_tokens={cap_floor_tokens})")
        self.queue_threshold = queue_threshold
        self.aging_weight = aging_weight
        self.cap_ratio = cap_ratio
        self.cap_floor_tokens = cap_floor_tokens
        self._known_seq = np.zeros(0, np.int64)
        """``arrival_seq`` of the requests seen last pass, ascending."""
        self._known_backlog = np.zeros(0)
        """Their FCFS backlogs (same order)."""

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
        """Prefill tokens of younger requests served while ``r`` waited (as of the last pass)."""
        waited = max(0, clock - r.arrival_processed_tokens)
        j = int(np.searchsorted(self._known_seq, r.arrival_seq))
        known = j < len(self._known_seq) and self._known_seq[j] == r.arrival_seq
        return max(0, waited - int(self._known_backlog[j] if known else 0))

    def rank(self, queue: QueueColumns) -> np.ndarray:
        n = len(queue)
        if n == 0:
            return np.zeros(0, np.int64)
        # NOTE: vectorized over the columns; the semantics are those of the
        # scalar methods above.
        work = queue.work
        seq = queue.arrival_seq
        waited = np.maximum(float(queue.processed_tokens) - queue.arrival_processed_tokens, 0.0)
        score = work / (1.0 + self.aging_weight * waited / work) if self.aging_weight else work
        by_arrival = np.argsort(seq, kind="stable")
        older_work = np.concatenate(([0.0], np.cumsum(work[by_arrival])[:-1]))
        backlog = self._update_backlog(seq, by_arrival, older_work)
        if n <= self.queue_threshold:
            full: np.ndarray = np.lexsort((seq, score))  # by score, ties by arrival
            return full
        added = np.maximum(waited - backlog, 0.0)
        budget = self.cap_ratio * np.maximum(work, self.cap_floor_tokens) - added
        limits = (queue.head_size, queue.prefill_budget_tokens)
        ranked = _best(score, seq, 2 * queue.head_size + 2)
        head, stopped = self._place(ranked, by_arrival, older_work, work, budget, *limits)
        if not stopped and len(ranked) < n:  # NOTE: ran out of candidates: rank them all
            head, _ = self._place(np.lexsort((seq, score)), by_arrival, older_work, work, budget, *limits)
        placed = np.zeros(n, bool)
        placed[head] = True
        # NOTE: the host admits nothing past the head this pass, so the rest keeps
        # the host's order (the columns module's contract): no full sort per pass.
        return np.concatenate((head, np.flatnonzero(~placed)))

    def _update_backlog(self, seq: np.ndarray, by_arrival: np.ndarray, older_work: np.ndarray) -> np.ndarray:
        """Per-row FCFS backlog; a request seen for the first time gets the work
        of the older requests waiting now."""
        seq_sorted = seq[by_arrival]
        known = self._known_seq
        idx = np.minimum(np.searchsorted(known, seq_sorted), max(0, len(known) - 1))
        found = (known[idx] == seq_sorted) if len(known) else np.zeros(len(seq), bool)
        backlog_sorted = np.where(found, self._known_backlog[idx] if len(known) else 0.0, older_work)
        self._known_seq, self._known_backlog = seq_sorted.copy(), backlog_sorted
        backlog = np.empty(len(seq))
        backlog[by_arrival] = backlog_sorted
        return backlog

    @staticmethod
    def _place(ranked: np.ndarray, by_arrival: np.ndarray, older_work: np.ndarray, work: np.ndarray,
               budget: np.ndarray, max_requests: int, max_tokens: float) -> tuple[np.ndarray, bool]:
        """Greedy placement: score order, but an older request goes first as soon
        as a younger one would exceed its remaining allowance (``budget``).
        Stops once ``max_requests`` are placed or ``max_tokens`` of work is
        (then the flag is ``True``), or when ``ranked`` runs out."""
        # NOTE: when the anchor is the oldest request not yet placed, every older
        # request is placed, so the work placed ahead of it by *younger* requests
        # is the total placed minus the work of all older ones (a prefix sum):
        # O(1) per check, O(head) per pass after the sort.
        # NOTE: numpy scalar reads, not list conversions: only the head is
        # visited, so this is O(head) Python whatever the queue length.
        pos_of = np.empty(len(by_arrival), np.int64)
        pos_of[by_arrival] = np.arange(len(by_arrival))
        placed_flags = bytearray(len(by_arrival))
        out: list[int] = []
        placed_work = 0.0
        oldest = 0  # arrival position of the oldest request not yet placed
        stopped = False
        for i in ranked:
            if len(out) >= max_requests or placed_work >= max_tokens:
                stopped = True
                break
            p = int(pos_of[i])
            if placed_flags[p]:
                continue
            w_i = float(work[i])
            while True:
                while placed_flags[oldest]:
                    oldest += 1
                a = int(by_arrival[oldest])
                if oldest == p or placed_work - older_work[oldest] + w_i <= budget[a]:
                    break
                placed_flags[oldest] = 1
                out.append(a)
                placed_work += float(work[a])
            placed_flags[p] = 1
            out.append(int(i))
            placed_work += w_i
        stopped = stopped or len(out) >= max_requests or placed_work >= max_tokens
        return np.array(out, dtype=np.int64), stopped


def _best(score: np.ndarray, seq: np.ndarray, k: int) -> np.ndarray:
    """Rows in (score, arrival) order: at least the ``k`` best, an exact prefix of the full order.

    NOTE: every row left out scores strictly more than every row kept (ties at
    the cut are all kept), so the prefix is the full order's.
    """
    n = len(score)
    if k >= n:
        full: np.ndarray = np.lexsort((seq, score))
        return full
    cut = np.partition(score, k - 1)[k - 1]
    rows = np.flatnonzero(score <= cut)
    best: np.ndarray = rows[np.lexsort((seq[rows], score[rows]))]
    return best
