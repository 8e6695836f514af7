"""Gap recompute: prefill only the missing middle of a cached history (Penelope).

With the gap cache (``gap_cache.GapRadixCache``) a request's cached path can
read ``prefix | gap | tail | gap | tail ...``. SGLang's ``match_prefix`` stops
at the first gap, so stock scheduling would recompute the gap *and* everything
after it. Instead the request is prefilled in chunks whose boundaries are the
gap ends, with SGLang's own chunked-prefill machinery:

1. admission (``GapPrefillAdder._select_prefill_admission``): a request whose
   match stops at a gap followed by cached KV is admitted as a chunk that ends
   where the gap ends: only the gap's tokens are computed, at their original
   positions, attending to the cached prefix;
2. after the chunk, the cache's ``checkpoint`` fills the hollow node with the
   new KV and hands the request the cached tail as its prefix
   (``GapRadixCache._adopt_cached_continuation``);
3. the continuation (``gap_chunk_limit``, SGLang's chunk-limit hook) again
   stops at the next gap's end, if any; the last chunk computes the request's
   new tokens as usual.

With a host tier (``cache.host_tier_tokens``) a gap the tier holds a copy of
is restored at admission instead (``GapRadixCache.restore_host_segments``,
counted in ``switchboard_host_restored_tokens``); only what it does not hold
is recomputed.

Recomputed gap tokens are counted when their forward runs
(``GapRecomputeCounter``: a Prometheus counter when prometheus_client is
importable, and a log line per request).

NOTE: SGLang tracks one chunked request at a time: a gap chunk is only formed
when no other chunk is pending (otherwise the request is prefilled the stock
way, exact but without reuse), and the adder stops after it, as SGLang's own
adder does after any chunk.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder

from server.sglang.cache.metrics import prometheus_counter
from server.sglang.scheduling.state import kind_record, own_kind_record

log = logging.getLogger("switchboard.gap_prefill")


@runtime_checkable
class HoldsGaps(Protocol):
    """A prefix cache that can hold gaps (``gap_cache.GapRadixCache``), as the prefill seam uses it."""

    def gap_at(self, req: Any, start: int) -> int | None:
        """Where the gap at ``start`` on ``req``'s path ends (``None``: no gap there)."""
        ...

    def restore_host_segments(self, req: Any) -> int:
        """Bring back the host tier's copies right after ``req``'s prefix; the tokens restored."""
        ...


@dataclass(slots=True)
class GapMark:
    """The cache kind's record of a request (``kind_record``)."""

    chunk: tuple[int, int] | None = None
    """The gap chunk chosen for it this pass: ``(start, end)`` token positions."""


def gap_chunk_of(req: Any) -> tuple[int, int] | None:
    """The gap chunk chosen for ``req`` this pass, if any."""
    mark = kind_record(req, GapMark)
    return None if mark is None else mark.chunk


class GapRecomputeCounter:
    """Tokens recomputed to fill gaps (per scheduler process)."""

    def __init__(self) -> None:
        self.tokens = 0
        self.chunks = 0
        self._prom = prometheus_counter("switchboard_gap_recomputed_tokens",
                                        "Tokens prefilled to fill gaps in cached histories (Penelope)")

    def batch_formed(self, batch: Any, prefill: bool) -> None:
        """``OnBatchFormed``: count a prefill batch's gap chunks before it runs."""
        if prefill and batch.extend_num_tokens:
            self.observe(batch)

    def adder_class(self, base: type) -> type:
        """``WrapsPrefillAdder``: gap chunks and host-tier restores in the prefill walk."""
        # NOTE: `type`, as WrapsPrefillAdder has it: mypy does not take `type[PrefillAdder]`
        # (SGLang's class is Any here) for the Hashable argument of a functools.cache function.
        return gap_prefill_adder(base)

    def chunk_limit(self, tree_cache: Any, chunked_req: Any) -> int | None:
        """``LimitsChunk``: a continuing chunk ends at the next gap."""
        return gap_chunk_limit(tree_cache, chunked_req)

    def observe(self, batch: Any) -> None:
        """Count the gap chunks of a prefill batch that is about to run."""
        for req in batch.reqs:
            mark = gap_chunk_of(req)
            if mark is None or mark != (req.prefix_len, req.extend_end):
                continue
            own_kind_record(req, GapMark).chunk = None
            n = mark[1] - mark[0]
            self.tokens += n
            self.chunks += 1
            self._prom.inc(n)
            log.info("gap recompute rid=%s positions=[%d, %d) recomputed_tokens=%d total=%d",
                     req.rid, mark[0], mark[1], n, self.tokens)


def gap_end(tree_cache: Any, req: Any, start: int) -> int | None:
    """Where the gap at ``start`` on ``req``'s path ends, if the cache has one."""
    return tree_cache.gap_at(req, start) if isinstance(tree_cache, HoldsGaps) else None


def gap_chunk_limit(tree_cache: Any, chunked_req: Any) -> int | None:
    """Chunk limit for a continuing request that stands at a gap (else ``None``)."""
    start: int = chunked_req.prefix_len
    end = gap_end(tree_cache, chunked_req, start)
    if end is None:
        return None
    own_kind_record(chunked_req, GapMark).chunk = (start, end)
    return end - start


@functools.cache
def gap_prefill_adder(base: type[PrefillAdder]) -> type[PrefillAdder]:
    class GapPrefillAdder(base):
        """Restores a host-held gap, or admits a request that stands at a gap
        as a chunk ending at the gap's end."""

        def _select_prefill_admission(self, req: Any, **kwargs: Any) -> Any:
            admission = super()._select_prefill_admission(req, **kwargs)
            if (isinstance(admission, AddReqResult) or kwargs.get("has_chunked_req")
                    or self.new_chunked_req is not None or admission.replay_len):
                return admission
            start = admission.prefix_len
            end = gap_end(self.tree_cache, req, start)
            if end is None or end >= start + admission.extend_len:
                return admission
            own_kind_record(req, GapMark).chunk = (start, end)
            return type(admission)(start, end - start, 0, True, admission.replay_len)

        def add_one_req(self, req: Any, has_chunked_req: bool, truncation_align_size: Any) -> Any:
            # NOTE: a host-held gap right after the prefix is restored, not
            # recomputed; SGLang then matches the request again (longer prefix)
            if isinstance(self.tree_cache, HoldsGaps) and self.tree_cache.restore_host_segments(req):
                req.init_next_round_input(self.tree_cache)
            return super().add_one_req(req, has_chunked_req, truncation_align_size)

        def budget_state(self) -> Any:
            # NOTE: one new chunked request per batch (SGLang's invariant)
            if self.new_chunked_req is not None:
                return AddReqResult.OTHER
            return super().budget_state()

    return GapPrefillAdder
