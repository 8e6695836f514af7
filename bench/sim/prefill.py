"""One prefill pass's budget: SGLang's ``PrefillAdder`` over the simulated pool.

Budgets, as SGLang keeps them (page size ``p``; ``clip`` = 4096)::

    remaining_total   = free + evictable - total_offset     (KV for prompts *and* outputs)
    remaining_current = free + evictable - current_offset   (KV this pass allocates)
    total_offset      = sum over running requests of min(max_new - out, clip) * ratio
                        + per admitted request: ceil_p(extend) + p + min(max_new, clip)
    current_offset    = per admitted request: ceil_p(extend) + p
    rem_input         = --max-prefill-tokens  - admitted extend tokens
    rem_chunk         = --chunked-prefill-size - admitted extend tokens (None: no chunking)

A request fits when ``extend + min(max_new - out, clip) + p < remaining_total``
with its own cached prefix locked (so that prefix is not counted evictable). A
request longer than ``rem_chunk`` is cut to it and becomes the (single)
chunked request. The walk stops at the first request that does not fit.

A request whose matched path has gaps (hollow nodes, ``bench/sim/cache.py``)
also needs ``gap`` slots and recomputes the gap in this pass: ``gap`` counts
in its memory check and its ``rem_input``/``rem_chunk`` use, and its new
tokens get what is left of the chunk (none at all if the gap alone exceeds it;
such a request then only waits for a pass it leads, not for a smaller gap).
"""

from __future__ import annotations

import enum

from bench.sim.cache import PrefixCache
from bench.sim.request import SimRequest


class AddResult(enum.Enum):
    """SGLang's ``AddReqResult``."""

    CONTINUE = "continue"
    NO_TOKEN = "no_token"
    OTHER = "other"


class PrefillAdder:
    """Admits requests into one prefill batch (see module docs)."""

    def __init__(self, cache: PrefixCache, free_tokens: int, running_offset: float, *,
                 rem_input: int, rem_chunk: int | None, page_size: int, clip: int,
                 max_requests: int | None) -> None:
        self.cache = cache
        self.free_tokens = free_tokens
        """Unallocated pool slots (nothing is allocated during the pass)."""
        self.total_offset = running_offset
        self.current_offset = 0.0
        self.rem_input = rem_input
        self.rem_chunk = rem_chunk
        self.page = page_size
        self.clip = clip
        self.max_requests = max_requests
        self.batch: list[tuple[SimRequest, int]] = []
        """Admitted requests and the tokens each extends this pass."""
        self.new_chunked: SimRequest | None = None

    @property
    def remaining_total(self) -> float:
        return self.free_tokens + self.cache.evictable_tokens - self.total_offset

    @property
    def remaining_current(self) -> float:
        return self.free_tokens + self.cache.evictable_tokens - self.current_offset

    def _ceil(self, n: int) -> int:
        return -(-n // self.page) * self.page

    def budget_state(self) -> AddResult:
        """Whether another request could be admitted."""
        if self.remaining_total <= 0 or self.remaining_current <= 0:
            return AddResult.NO_TOKEN
        if self.rem_input <= 0 or (self.rem_chunk is not None and self.rem_chunk <= 0):
            return AddResult.OTHER
        return AddResult.CONTINUE

    def _reserve(self, extend: int, max_new: int) -> None:
        immediate = self._ceil(extend) + self.page
        self.total_offset += immediate + max_new
        self.current_offset += immediate
        self.rem_input -= self._ceil(extend)
        if self.rem_chunk is not None:
            self.rem_chunk -= self._ceil(extend)

    def _max_new(self, r: SimRequest) -> int:
        return min(max(r.output_len - r.num_output, 0), self.clip)

    def add_chunked(self, r: SimRequest) -> bool:
        """Continue the chunked request; ``True`` if it still is not done after this pass."""
        assert self.rem_chunk is not None
        rem = min(self.rem_chunk, int(self.remaining_total))
        if rem <= 0:
            rem = self.rem_chunk  # NOTE: a continuation must progress to free its KV
        remaining = r.fill_len - r.computed
        extend = min(remaining, rem)
        truncated = remaining > rem
        self.batch.append((r, extend))
        self._reserve(extend, 0 if truncated else min(r.output_len, self.clip))
        return truncated

    def add(self, r: SimRequest) -> AddResult:
        """Try to admit waiting request ``r`` (already matched this pass)."""
        if self.max_requests is not None and len(self.batch) >= self.max_requests:
            return AddResult.OTHER
        max_new = self._max_new(r)
        prefix = r.cached_tokens()
        extend = r.fill_len - prefix
        assert r.match_node is not None
        gap = self.cache.hollow_tokens(r.match_node) if self.cache.may_have_gaps else 0
        total = extend + gap + max_new + self.page
        # NOTE: SGLang locks the request's prefix while checking: not evictable.
        pinned = self.cache.unlocked_tokens_on_path(r.match_node)
        if not total < self.remaining_total - pinned:
            return AddResult.NO_TOKEN
        paged = self._ceil(extend) + gap
        if self.rem_chunk is None and self.batch and paged >= self.rem_input:
            return AddResult.OTHER
        if self.rem_chunk is not None and paged > self.rem_chunk:
            if gap and self.batch and gap >= self.rem_chunk:
                return AddResult.OTHER  # NOTE: the gap is recomputed in one pass: lead one
            room = max(self.rem_chunk - gap, 0)
            end = (prefix + room // self.page * self.page) // self.page * self.page
            extend = end - prefix
            if extend <= 0 and not gap:
                return AddResult.OTHER
            self.new_chunked = r
            max_new = 0
        self.cache.lock(r.match_node)
        self.batch.append((r, extend))
        self._reserve(extend + gap, max_new)
        return self.budget_state()
