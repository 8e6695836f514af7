"""The segment store as SGLang's HiCache storage (``tier.storage=segments``).

SGLang 0.5.23 builds it through its ``dynamic`` storage backend (the only way
in for a class of one's own: ``StorageBackendFactory`` refuses other new
names), as ``SegmentStorage(storage_config, {})``, with the extra config the
tier binding writes (``binding.SEGMENTS``: the directory, the byte bound, the
tokens per segment). SGLang's controller hands it pages through the generic
page interface: ``batch_set(keys, flat pages)`` after a host write,
``batch_exists`` to size a prefetch, ``batch_get(keys, staging pages)``, and
stops a prefetch at the first page it gets back as ``None``.

What it adds to SGLang's ``file`` storage (one file per page, no checksum: a
damaged file loads as KV): the pages of one write batch lie contiguously in
append-only segments and consecutive pages load with one read; every page is
checked against the digest taken at write; with the tier cache placing
(``+tier=flatcake``), a session's pages go to that session's own segments
(``group``); a damaged or missing page is a miss (the prefix stops, the rest
is recomputed) and counted
(``switchboard_tier_corrupt_pages``, ``switchboard_tier_missing_pages``).

NOTE: one store per rank and model (``<dir>/<model>_<tp rank>_<tp size>``);
the index lives in memory, so a restart starts empty (``segments.py``).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np
import torch
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig, HiCacheStorageExtraInfo

from server.sglang.cache.metrics import prometheus_counter
from server.sglang.hicache.segments import SegmentStore

logger = logging.getLogger(__name__)

#: Page keys waiting for their session's segment at most (``SegmentStorage.group``).
MAX_PENDING = 1 << 20


class SegmentStorage(HiCacheStorage):  # type: ignore[misc]  # SGLang is untyped
    """HiCache storage over a ``SegmentStore`` (see module docs)."""

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: dict[str, Any] | None = None) -> None:
        extra = storage_config.extra_config or {}
        model = "-".join((storage_config.model_name or "model").split("/"))
        self.directory = os.path.join(str(extra["segments_dir"]),
                                      f"{model}_{storage_config.tp_rank}_{storage_config.tp_size}")
        self.max_bytes = int(extra["max_size"])
        self.segment_tokens = int(extra["segment_tokens"])
        self.store: SegmentStore | None = None
        self._corrupt = prometheus_counter("switchboard_tier_corrupt_pages",
                                           "Stored KV pages that failed their checksum: read as misses")
        self._missing = prometheus_counter("switchboard_tier_missing_pages",
                                           "Stored KV pages gone or short at read: read as misses")
        self._seen = (0, 0)
        self._groups: dict[str, str] = {}
        """Page key -> the session whose segment it goes to (``group``), until it is written."""

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        super().register_mem_pool_host(mem_pool_host)
        # NOTE: built here, where the page size is known: a segment closes after segment_tokens
        self.store = SegmentStore(self.directory, self.max_bytes,
                                  max(1, self.segment_tokens // int(mem_pool_host.page_size)))
        logger.info("switchboard segment storage at %s (%d bytes, %d pages per segment)", self.directory,
                    self.max_bytes, self.store.segment_pages)

    def _store(self) -> SegmentStore:
        if self.store is None:
            raise RuntimeError("SegmentStorage used before SGLang registered its host pool")
        return self.store

    # ------------------------------------------------------------ writes
    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        return self.batch_set([key], [value])

    def batch_set(self, keys: list[str], values: Any = None, target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        pages = [v.contiguous().view(torch.uint8).numpy().tobytes() for v in values]
        groups = [self._groups.pop(key, None) for key in keys]
        return all(self._store().put(keys, pages, group=groups[0] if groups else None))

    def group(self, keys: list[str], session: str) -> None:
        """Send ``keys``' pages, when SGLang's backup thread writes them, to ``session``'s own
        segments, so a session's blocks lie together (the tier cache calls it before it asks for
        the write).

        NOTE: a key's entry goes when its page is written; past ``MAX_PENDING`` entries (writes
        that never came) the table starts over: a page written later goes to the shared stream."""
        if len(self._groups) > MAX_PENDING:
            self._groups.clear()
        self._groups.update(dict.fromkeys(keys, session))

    # ------------------------------------------------------------- reads
    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> torch.Tensor | None:
        return self.batch_get([key], [target_location])[0]

    def batch_get(self, keys: list[str], target_locations: Any = None,
                  target_sizes: Any = None) -> list[torch.Tensor | None]:
        store = self._store()
        out: list[torch.Tensor | None] = []
        for data, target in zip(store.get(keys), target_locations):
            if data is None or target is None or len(data) != target.numel() * target.element_size():
                out.append(None)
                continue
            target.view(torch.uint8).numpy()[:] = np.frombuffer(data, dtype=np.uint8)
            out.append(target)
        self._count(store)
        return out

    def exists(self, key: str) -> bool:
        return self._store().prefix([key]) == 1

    def batch_exists(self, keys: list[str], extra_info: HiCacheStorageExtraInfo | None = None) -> int:
        return self._store().prefix(keys)

    def discard(self, keys: list[str]) -> int:
        """Forget ``keys`` (``SegmentStore.discard``): a block moved back up to host memory."""
        return self._store().discard(keys)

    def _count(self, store: SegmentStore) -> None:
        corrupt, missing = store.corrupt_pages - self._seen[0], store.missing_pages - self._seen[1]
        self._seen = (store.corrupt_pages, store.missing_pages)
        if corrupt:
            logger.warning("switchboard segment storage: %d stored page(s) failed their checksum: "
                           "read as misses, recomputed", corrupt)
            self._corrupt.inc(corrupt)
        if missing:
            self._missing.inc(missing)
