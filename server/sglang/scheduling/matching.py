"""Prefix-cache hits of waiting requests, kept current without re-matching the queue.

SGLang's cache-aware orders re-match every waiting request against the radix
tree on every scheduling pass (``_compute_prefix_matches``): O(queue x prompt)
per step, which is why its ``lpm``/``hrrn`` fall back to FCFS above 128
waiting requests. ``MatchTracker`` matches a request once, when it arrives,
and again only when the tree may have changed *its* answer:

* **gains** — a sequence inserted into the tree (every ``tree_cache.insert``
  is recorded) can only lengthen the match of a waiting request that shares a
  longer prefix with it. Each waiting request is indexed under one chained
  ``block``-token hash: that of its prompt through the first block its match
  does not cover. An insert that contains that block shares more than the
  match (hashes are chained, so it contains every earlier one too); so an
  insert costs one lookup per block and re-matches exactly the requests whose
  shared prefix with it grows by a block (sharing that ends inside a block is
  not seen until the next re-match: an under-estimate of less than ``block``
  tokens);
* **losses** — eviction can only shorten matches. The tracker counts the
  tree's evictions (``evict``, ``evict_for_alloc``, ``reset`` are wrapped) and
  the caller re-checks the requests it is about to admit (``recheck``), which
  is where a stale hit would matter; a request is re-matched there only if the
  tree evicted something since its last match. The rest keep their last value
  until they get near the front.

The caller reports queue membership (``add`` on arrival, ``forget`` on
departure), so the tracker does no per-pass work for requests whose answer
cannot have changed.

NOTE: the tracker only supplies ordering estimates. The PrefillAdder re-matches
every request it admits (``init_next_round_input``), so KV reuse is always
exact whatever the tracker holds.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sglang.srt.mem_cache.common import match_kv_cache

DEFAULT_BLOCK = 64
#: Tree methods that drop KV from the device (wrapped to count evictions).
EVICTING_METHODS = ("evict", "evict_for_alloc", "reset")


def _seed(extra_key: Any, cache_salt: Any) -> int:
    return hash(("switchboard-prefix", extra_key, cache_salt))


_MULT = np.random.default_rng(0x5B0A).integers(1, 2**63, size=4096, dtype=np.uint64) | np.uint64(1)


def token_array(token_ids: Any) -> np.ndarray:
    """Token ids as int64 (a view, without copying, of SGLang's ``array('q')``)."""
    if isinstance(token_ids, np.ndarray):
        return token_ids.astype(np.int64, copy=False)
    if isinstance(token_ids, array) and token_ids.typecode == "q":
        return np.frombuffer(token_ids, dtype=np.int64) if len(token_ids) else np.zeros(0, np.int64)
    return np.asarray(token_ids, dtype=np.int64)


def chained_hashes(token_ids: Any, block: int, seed: int) -> list[int]:
    """``h_j`` identifies the first ``(j + 1) * block`` tokens (whole blocks only).

    Vectorized: each block is hashed by a dot product with fixed random odd
    64-bit multipliers (wrapping), the block hashes are salted by the seed and their
    position and mixed, and a running (wrapping) sum chains them, so ``h_j`` depends on
    every token of the first ``j + 1`` blocks and their positions.

    NOTE: keys that are not plain token ids (EAGLE's bigram tuples) hash to
    nothing: such inserts are not seen as gains (the tracker is an estimate; a
    hash collision costs at most one needless re-match).
    """
    if not 0 < block <= len(_MULT):
        raise ValueError(f"block must be in 1..{len(_MULT)}")
    try:
        tokens = token_array(token_ids)
    except (TypeError, ValueError, OverflowError):
        return []
    n_blocks = len(tokens) // block
    if n_blocks == 0 or tokens.ndim != 1:
        return []
    with np.errstate(over="ignore"):
        t = tokens[: n_blocks * block].view(np.uint64).reshape(n_blocks, block)
        per_block = t @ _MULT[:block]  # NOTE: integer matmul wraps mod 2**64
        per_block ^= np.uint64(seed & 0xFFFFFFFFFFFFFFFF)
        per_block += np.arange(n_blocks, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)  # position
        per_block = (per_block ^ (per_block >> np.uint64(29))) * np.uint64(0xBF58476D1CE4E5B9)
        chained = np.cumsum(per_block, dtype=np.uint64)
        chained = (chained ^ (chained >> np.uint64(32))) * np.uint64(0x94D049BB133111EB)
    hashes: list[int] = chained.tolist()
    return hashes


@dataclass
class _Entry:
    req: Any
    hashes: list[int] = field(default_factory=list)
    indexed: int | None = None
    """The hash this request is indexed under (the first block beyond its
    match), ``None`` when its match covers every whole block."""
    evictions: int = -1
    """The tracker's eviction count when this request was last matched."""


class MatchTracker:
    """Per-scheduler tracker of waiting requests' cache hits (see module docs)."""

    def __init__(self, tree_cache: Any, block: int = DEFAULT_BLOCK) -> None:
        self.tree_cache = tree_cache
        self.block = block
        self._entries: dict[str, _Entry] = {}
        self._index: dict[int, set[str]] = {}
        self._inserted: list[list[int]] = []
        self.evictions = 0
        """Calls to the tree's evicting methods seen so far."""
        self._watching = False
        self.num_matches = 0
        """Calls into SGLang's matcher so far (for tests and benchmarks)."""

    def watch_tree(self) -> None:
        """Record every insert and count every eviction of the tree from now on."""
        original_insert = self.tree_cache.insert

        def insert(params: Any, *args: Any, **kwargs: Any) -> Any:
            key = params.key
            # NOTE: only while requests wait (nothing else can gain; a request that
            # arrives later is matched then). Hashed now: the key's token list may
            # belong to a Req that keeps growing.
            if self._entries:
                self._inserted.append(chained_hashes(
                    key.token_ids, self.block, _seed(key.extra_key, getattr(key, "cache_salt", None))))
            return original_insert(params, *args, **kwargs)

        self.tree_cache.insert = insert
        for name in EVICTING_METHODS:
            if hasattr(self.tree_cache, name):
                setattr(self.tree_cache, name, self._counting(getattr(self.tree_cache, name)))
        self._watching = True

    def _counting(self, method: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.evictions += 1
            return method(*args, **kwargs)
        return wrapper

    def add(self, r: Any) -> None:
        """Start tracking a request that joined the waiting queue (matches it)."""
        if r.rid in self._entries:
            self.forget(r.rid)  # NOTE: a new Req object under a reused rid, or a re-queued one
        ids = np.concatenate((token_array(r.origin_input_ids), token_array(r.output_ids)))
        hashes = chained_hashes(ids, self.block, _seed(r.extra_key, getattr(r, "cache_salt", None)))
        self._entries[r.rid] = _Entry(r, hashes)
        self._match(r)

    def forget(self, rid: str) -> None:
        """Stop tracking a request that left the waiting queue."""
        entry = self._entries.pop(rid, None)
        if entry is not None:
            self._unindex(rid, entry)

    def apply_inserts(self) -> list[Any]:
        """Re-match the requests the inserts since the last call may have lengthened."""
        inserted, self._inserted = self._inserted, []
        gainers = [self._entries[rid].req for rid in self._gainers(inserted)]
        for r in gainers:
            self._match(r)
        return gainers

    def recheck(self, reqs: Iterable[Any]) -> list[Any]:
        """Re-match ``reqs`` (the ones about to be admitted) if the tree evicted
        anything since their last match; the ones whose hit changed."""
        changed = []
        for r in reqs:
            entry = self._entries.get(r.rid)
            if entry is not None and self._watching and entry.evictions == self.evictions:
                continue  # NOTE: nothing was evicted since: the match cannot have shrunk
            before = r.num_matched_prefix_tokens
            self._match(r)
            if r.num_matched_prefix_tokens != before:
                changed.append(r)
        return changed

    def _unindex(self, rid: str, entry: _Entry) -> None:
        h = entry.indexed
        if h is not None and (rids := self._index.get(h)) is not None:
            rids.discard(rid)
            if not rids:
                del self._index[h]
        entry.indexed = None

    def _gainers(self, inserted: list[list[int]]) -> set[str]:
        out: set[str] = set()
        index = self._index
        for hashes in inserted:
            for h in hashes:
                rids = index.get(h)
                if rids:
                    # NOTE: indexed only beyond their match: each shares more now
                    out.update(rids)
        return out

    def _match(self, r: Any) -> None:
        self.num_matches += 1
        match_kv_cache(r, self.tree_cache)
        entry = self._entries.get(r.rid)
        if entry is None:
            return
        entry.evictions = self.evictions
        start = r.num_matched_prefix_tokens // self.block
        h = entry.hashes[start] if start < len(entry.hashes) else None
        if h != entry.indexed:
            self._unindex(r.rid, entry)
            if h is not None:
                self._index.setdefault(h, set()).add(r.rid)
                entry.indexed = h

    def matched(self, rid: str) -> int | None:
        entry = self._entries.get(rid)
        return None if entry is None else entry.req.num_matched_prefix_tokens
