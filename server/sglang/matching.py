"""Prefix-cache hits of waiting requests, kept current without re-matching the queue.

SGLang's cache-aware orders re-match every waiting request against the radix
tree on every scheduling pass (``_compute_prefix_matches``): O(queue x prompt)
per step, which is why its ``lpm``/``hrrn`` fall back to FCFS above 128
waiting requests. ``MatchTracker`` matches a request once, when it arrives,
and again only when the tree may have changed *its* answer:

* **gains** — a sequence inserted into the tree (every ``tree_cache.insert``
  is recorded) can only lengthen the match of a waiting request that shares a
  longer prefix with it. Prompts are indexed by chained ``block``-token hashes,
  so an insert costs one lookup per block and re-matches exactly the requests
  whose shared prefix with it exceeds their current match (sharing that ends
  inside a block is not seen until the next re-match: an under-estimate of
  less than ``block`` tokens);
* **losses** — eviction can only shorten matches. The caller re-checks the
  requests it is about to admit (``recheck``), which is where a stale hit would
  matter; the rest keep their last value until they get near the front.

NOTE: the tracker only supplies ordering estimates. The PrefillAdder re-matches
every request it admits (``init_next_round_input``), so KV reuse is always
exact whatever the tracker holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from sglang.srt.mem_cache.common import match_kv_cache

DEFAULT_BLOCK = 64


def _seed(extra_key: Any, cache_salt: Any) -> int:
    return hash(("switchboard-prefix", extra_key, cache_salt))


def chained_hashes(token_ids: Any, block: int, seed: int) -> list[int]:
    """``h_j`` identifies the first ``(j + 1) * block`` tokens (whole blocks only)."""
    out, h = [], seed
    for start in range(0, len(token_ids) - block + 1, block):
        h = hash((h, tuple(token_ids[start:start + block])))
        out.append(h)
    return out


@dataclass
class _Entry:
    req: Any
    hashes: list[int] = field(default_factory=list)
    indexed_from: int = 0
    """Blocks ``hashes[indexed_from:]`` are in the index: only blocks beyond the
    current match, the only ones an insert can make the match grow into."""


class MatchTracker:
    """Per-scheduler tracker of waiting requests' cache hits (see module docs)."""

    def __init__(self, tree_cache: Any, block: int = DEFAULT_BLOCK) -> None:
        self.tree_cache = tree_cache
        self.block = block
        self._entries: dict[str, _Entry] = {}
        self._index: dict[int, set[str]] = {}
        self._inserted: list[tuple[Any, int]] = []
        self.num_matches = 0
        """Calls into SGLang's matcher so far (for tests and benchmarks)."""

    def watch_inserts(self) -> None:
        """Record every sequence the tree inserts from now on (wraps ``tree_cache.insert``)."""
        original = self.tree_cache.insert

        def insert(params: Any, *args: Any, **kwargs: Any) -> Any:
            key = params.key
            self._inserted.append((key.token_ids, _seed(key.extra_key, getattr(key, "cache_salt", None))))
            return original(params, *args, **kwargs)

        self.tree_cache.insert = insert

    def refresh(self, waiting_queue: list) -> None:
        """Bring every waiting request's ``num_matched_prefix_tokens`` up to date."""
        live = {r.rid for r in waiting_queue}
        for rid in [rid for rid in self._entries if rid not in live]:
            self._forget(rid)
        for r in waiting_queue:
            entry = self._entries.get(r.rid)
            if entry is None or entry.req is not r:
                if entry is not None:
                    self._forget(r.rid)  # NOTE: a new Req object under a reused rid
                self._add(r)
        inserted, self._inserted = self._inserted, []
        for rid in self._gainers(inserted):
            self._match(self._entries[rid].req)

    def recheck(self, reqs: Iterable[Any]) -> bool:
        """Re-match ``reqs`` (the ones about to be admitted); whether any hit changed."""
        changed = False
        for r in reqs:
            before = r.num_matched_prefix_tokens
            self._match(r)
            changed |= r.num_matched_prefix_tokens != before
        return changed

    def _add(self, r: Any) -> None:
        ids = r.origin_input_ids + r.output_ids
        entry = _Entry(r, chained_hashes(ids, self.block, _seed(r.extra_key, getattr(r, "cache_salt", None))),
                       indexed_from=0)
        for h in entry.hashes:
            self._index.setdefault(h, set()).add(r.rid)
        self._entries[r.rid] = entry
        self._match(r)

    def _forget(self, rid: str) -> None:
        entry = self._entries.pop(rid)
        self._unindex(rid, entry.hashes[entry.indexed_from:])

    def _unindex(self, rid: str, hashes: list[int]) -> None:
        for h in hashes:
            rids = self._index.get(h)
            if rids is not None:
                rids.discard(rid)
                if not rids:
                    del self._index[h]

    def _gainers(self, inserted: list[tuple[Any, int]]) -> set[str]:
        out: set[str] = set()
        for token_ids, seed in inserted:
            for j, h in enumerate(chained_hashes(token_ids, self.block, seed)):
                rids = self._index.get(h)
                if rids:
                    # NOTE: indexed only beyond their match: each shares more now
                    out.update(rids)
        return out

    def _match(self, r: Any) -> None:
        self.num_matches += 1
        match_kv_cache(r, self.tree_cache)
        entry = self._entries[r.rid]
        start = min(r.num_matched_prefix_tokens // self.block, len(entry.hashes))
        if start > entry.indexed_from:
            self._unindex(r.rid, entry.hashes[entry.indexed_from:start])
        else:
            for h in entry.hashes[start:entry.indexed_from]:
                self._index.setdefault(h, set()).add(r.rid)
        entry.indexed_from = start

    def matched(self, rid: str) -> Optional[int]:
        entry = self._entries.get(rid)
        return None if entry is None else entry.req.num_matched_prefix_tokens
