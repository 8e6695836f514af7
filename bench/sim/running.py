"""The running (decoding) batch, advanced in O(1) per decode step.

Every running request gains one token per decode step, so nothing per request
is touched per step: a request remembers the step it joined at, its counters
are brought up to date (``sync``) only when someone looks, and a heap keyed by
the step at which it will have all its tokens finds the finishers.

``NOTE``: ``context_tokens()`` equals ``sum(r.fill_len)`` over running requests
after ``sync``; ``step`` is the number of decode steps run so far.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Iterator

from bench.sim.request import Phase, SimRequest


class RunningBatch:
    """SGLang's ``running_batch`` (decode phase), with lazy per-request counters."""

    def __init__(self) -> None:
        self.reqs: list[SimRequest] = []
        self.step = 0
        self.step_end_times = array("d")
        """End time of every decode step (token times of running requests)."""
        self._ctx_base = 0
        self._finish: list[tuple[int, int, int, SimRequest]] = []

    def __len__(self) -> int:
        return len(self.reqs)

    def __iter__(self) -> Iterator[SimRequest]:
        return iter(self.reqs)

    def sync(self, r: SimRequest) -> None:
        """Bring ``r``'s output and private-KV counters to the current step."""
        delta = self.step - r.decode_from
        if delta:
            r.num_output += delta
            r.private_tokens += delta
            r.decode_from = self.step

    def join(self, r: SimRequest) -> None:
        """``r`` finished its prefill with tokens left to generate."""
        r.phase = Phase.RUNNING
        r.decode_from = self.step
        self.reqs.append(r)
        self._ctx_base += r.fill_len - self.step
        done_at = self.step + r.output_len - r.num_output
        heapq.heappush(self._finish, (done_at, r.seq, r.retractions, r))

    def leave(self, r: SimRequest) -> None:
        """Remove ``r`` (finished or retracted); its counters are synced first."""
        self.sync(r)
        self._ctx_base -= r.fill_len - self.step
        self.reqs.remove(r)
        self._close_segment(r)

    def _close_segment(self, r: SimRequest) -> None:
        t, start, _ = r.segments[-1]
        r.segments[-1] = (t, start, self.step)

    def context_tokens(self) -> int:
        """Tokens of KV the next decode step attends over."""
        return self._ctx_base + len(self.reqs) * self.step

    def accept(self, batch: list[SimRequest], accepted: list[int]) -> int:
        """This step's verify kept ``accepted[i]`` drafts of ``batch[i]`` beyond its
        one token (capped at what the request still has to generate); return the
        tokens gained. NOTE: a request that gained tokens gets a new, earlier
        finish entry; the old one is skipped when it pops (no longer running)."""
        gained = 0
        for r, a in zip(batch, accepted, strict=True):
            self.sync(r)
            g = min(a, r.output_len - r.num_output - 1)
            if g <= 0:
                continue
            r.num_output += g
            r.private_tokens += g
            r.extra_tokens.append((self.step, g))
            self._ctx_base += g
            gained += g
            heapq.heappush(self._finish, (self.step + r.output_len - r.num_output, r.seq, r.retractions, r))
        return gained

    def advance(self, end_time: float) -> list[SimRequest]:
        """One decode step ended at ``end_time``; return the requests it finished."""
        self.step += 1
        self.step_end_times.append(end_time)
        done = []
        heap = self._finish
        while heap and heap[0][0] <= self.step:
            _, _, epoch, r = heapq.heappop(heap)
            if r.phase is Phase.RUNNING and epoch == r.retractions:
                done.append(r)
        return done

    def retraction_order(self) -> list[SimRequest]:
        """SGLang's ``_get_decode_retraction_order``: most worth keeping first
        (most output, then shortest prompt); retraction pops from the end."""
        for r in self.reqs:
            self.sync(r)
        # NOTE: a stable sort, as SGLang's over indices (reverse keeps ties in batch order).
        return sorted(self.reqs, key=lambda r: (r.num_output, -r.input_len), reverse=True)

    def reorder(self, keep: list[SimRequest]) -> None:
        """SGLang's ``filter_batch(keep_indices=...)`` after retraction."""
        assert set(keep) <= set(self.reqs)
        self.reqs = list(keep)
