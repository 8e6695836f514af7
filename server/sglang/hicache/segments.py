"""Append-only segment files for KV pages, each page checked on read (no SGLang, no torch).

The SSD level's store behind ``tier.storage=segments`` (``segment_backend.py``
binds it to SGLang's storage interface). Pages arrive in write batches (one
tree node's pages, in path order) and are appended to the open segment of
their *group* (a session, when the writer knows it; ``None``: one shared
stream), so a path's pages lie contiguously; a segment is closed at
``segment_pages`` pages and a new one opened. The index maps a page key (SGLang's
page hash) to ``(segment, offset, length, digest)``; the digest (BLAKE2b) is taken
at write and checked at every read.

* ``put``: pages whose key is already stored are skipped (as SGLang's file
  storage skips them); a failed write stores nothing of the batch's rest.
* ``get``: consecutive pages adjacent in one segment are read with one
  ``pread`` (``range_reads`` counts them); a page that is missing, short or
  fails its digest reads as ``None``, is dropped from the index and counted
  (``missing_pages``, ``corrupt_pages``): never wrong bytes. The caller stops
  its prefix at the first ``None`` (SGLang's prefetch does).
* ``discard``: keys leave the index (a block moved back up); their bytes stay
  until their segment goes.
* Capacity: past ``max_bytes`` whole segments go, oldest first (the open ones
  too when nothing else is left); their pages read as missing.

NOTE (invariants, ``check``): every indexed page lies inside its segment's
written bytes; ``stored_bytes`` is the sum of the live segments' sizes and
stays <= ``max_bytes`` after each ``put``; a segment file holds only pages
appended by this process (the directory is emptied at start: the index is not
persisted, so pages of an earlier run could not be checked).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

_SUFFIX = ".seg"


@dataclass(frozen=True, slots=True)
class PageRef:
    """Where one page lives."""

    segment: int
    offset: int
    length: int
    digest: bytes


def digest_of(data: bytes | memoryview) -> bytes:
    """A page's checksum (BLAKE2b, 16 bytes)."""
    return hashlib.blake2b(data, digest_size=16).digest()


class SegmentStore:
    """Pages in append-only segment files with a checked index (see module docs)."""

    def __init__(self, directory: str, max_bytes: int, segment_pages: int) -> None:
        if max_bytes < 1 or segment_pages < 1:
            raise ValueError(f"need max_bytes >= 1 and segment_pages >= 1, got {max_bytes}, {segment_pages}")
        self.directory = directory
        self.max_bytes = max_bytes
        self.segment_pages = segment_pages
        os.makedirs(directory, exist_ok=True)
        for name in os.listdir(directory):
            if name.endswith(_SUFFIX):
                os.remove(os.path.join(directory, name))
        self.index: dict[str, PageRef] = {}
        self.sizes: OrderedDict[int, int] = OrderedDict()
        """Live segments, oldest first: bytes written."""
        self._pages: dict[int, list[str]] = {}
        self._open: dict[str | None, int] = {}
        """The segment each group appends to."""
        self._next = 0
        self._lock = threading.Lock()
        self.stored_bytes = 0
        self.corrupt_pages = 0
        self.missing_pages = 0
        self.range_reads = 0
        self.pages_read = 0

    def path(self, segment: int) -> str:
        return os.path.join(self.directory, f"{segment:08d}{_SUFFIX}")

    # ------------------------------------------------------------- writes
    def put(self, keys: Sequence[str], pages: Sequence[bytes | memoryview], group: str | None = None) -> list[bool]:
        """Store each page under its key (see module docs); per page, whether it is stored."""
        if len(keys) != len(pages):
            raise ValueError(f"{len(keys)} keys for {len(pages)} pages")
        done: list[bool] = []
        fds: dict[int, int] = {}
        # NOTE: each segment file this batch writes is opened once, closed at its end
        with self._lock:
            try:
                for key, page in zip(keys, pages):
                    if key in self.index:
                        done.append(True)
                        continue
                    if not self._append(key, page, group, fds):
                        break
                    done.append(True)
            finally:
                for fd in fds.values():
                    os.close(fd)
            self._shrink()
        return done + [False] * (len(keys) - len(done))

    def _append(self, key: str, page: bytes | memoryview, group: str | None, fds: dict[int, int]) -> bool:
        segment = self._open.get(group)
        if segment is None or len(self._pages[segment]) >= self.segment_pages:
            segment = self._start(group)
        offset = self.sizes[segment]
        try:
            if segment not in fds:
                fds[segment] = os.open(self.path(segment), os.O_WRONLY | os.O_CREAT, 0o644)
            # NOTE: at the recorded offset, not the file's end: the index never trusts the file's length
            written = os.pwrite(fds[segment], page, offset)
        except OSError:
            return False
        length = len(page)
        if written != length:
            return False
        self.index[key] = PageRef(segment, offset, length, digest_of(page))
        self._pages[segment].append(key)
        self.sizes[segment] += length
        self.stored_bytes += length
        return True

    def _start(self, group: str | None) -> int:
        segment, self._next = self._next, self._next + 1
        self.sizes[segment] = 0
        self._pages[segment] = []
        self._open[group] = segment
        return segment

    def _shrink(self) -> None:
        while self.stored_bytes > self.max_bytes and self.sizes:
            self._drop(next(iter(self.sizes)))

    def _drop(self, segment: int) -> None:
        self.stored_bytes -= self.sizes.pop(segment)
        for key in self._pages.pop(segment):
            ref = self.index.get(key)
            if ref is not None and ref.segment == segment:
                del self.index[key]
        self._open = {g: s for g, s in self._open.items() if s != segment}
        try:
            os.remove(self.path(segment))
        except OSError:
            pass

    # -------------------------------------------------------------- reads
    def get(self, keys: Sequence[str]) -> list[bytes | None]:
        """Each page's bytes, or ``None`` where it is missing or fails its check (see module docs)."""
        with self._lock:
            refs = [self.index.get(k) for k in keys]
        out: list[bytes | None] = [None] * len(keys)
        i = 0
        while i < len(keys):
            ref = refs[i]
            if ref is None:
                self.missing_pages += 1
                i += 1
                continue
            j = i + 1  # NOTE: extend the run while the next page follows this one in the same segment
            while j < len(keys):
                prev, nxt = refs[j - 1], refs[j]
                if nxt is None or prev is None or nxt.segment != ref.segment \
                        or nxt.offset != prev.offset + prev.length:
                    break
                j += 1
            run = refs[i:j]
            data = self._read(ref.segment, ref.offset, sum(r.length for r in run if r is not None))
            self.range_reads += 1
            at = 0
            for k, r in enumerate(run, start=i):
                assert r is not None
                page = data[at:at + r.length] if data is not None else b""
                at += r.length
                if len(page) == r.length and digest_of(page) == r.digest:
                    out[k] = page
                    self.pages_read += 1
                else:
                    self._forget(keys[k], r, corrupt=data is not None and len(page) == r.length)
            i = j
        return out

    def _read(self, segment: int, offset: int, length: int) -> bytes | None:
        try:
            fd = os.open(self.path(segment), os.O_RDONLY)
        except OSError:
            return None
        try:
            return os.pread(fd, length, offset)
        except OSError:
            return None
        finally:
            os.close(fd)

    def _forget(self, key: str, ref: PageRef, corrupt: bool) -> None:
        with self._lock:
            if self.index.get(key) == ref:
                del self.index[key]
        if corrupt:
            self.corrupt_pages += 1
        else:
            self.missing_pages += 1

    def prefix(self, keys: Sequence[str]) -> int:
        """How many of ``keys``, from the first, are indexed (a read may still find one corrupt)."""
        with self._lock:
            for n, key in enumerate(keys):
                if key not in self.index:
                    return n
        return len(keys)

    def discard(self, keys: Sequence[str]) -> int:
        """Forget ``keys`` (a block moved up to host memory: an exclusive hierarchy holds it once);
        they read as absent from now on, their bytes stay until their segment goes. Returns
        how many were stored."""
        with self._lock:
            return sum(self.index.pop(key, None) is not None for key in keys)

    # ---------------------------------------------------------- integrity
    def check(self) -> None:
        """Assert the invariants (module docs); tests call it."""
        with self._lock:
            assert self.stored_bytes == sum(self.sizes.values()) <= self.max_bytes
            for ref in self.index.values():
                assert ref.segment in self.sizes and ref.offset + ref.length <= self.sizes[ref.segment]
            for segment, size in self.sizes.items():
                on_disk = os.path.getsize(self.path(segment)) if os.path.exists(self.path(segment)) else 0
                assert on_disk >= size
