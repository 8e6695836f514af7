"""Recurrent-state snapshots on SSD, one checked file each (no SGLang, no torch).

HiState's SSD level: a hybrid model's recurrent-state snapshot evicted from the
device is demoted here and read back on a later prefix hit. Each snapshot is one
file named by the hex SHA-256 of its key (any key is a safe name) holding a
header (magic, format version, payload length, SHA-256 of key and payload) and
the payload.

* ``put``: written to a temporary file in the same directory, then
  ``os.replace``-d over its name (a failed write leaves the old snapshot, if
  any, in place). Refused (``False``, nothing written) when the file alone
  exceeds ``max_bytes`` or does not fit in ``free_bytes``; re-putting a key
  replaces it and only the size difference must fit.
* ``get``: a file that is missing, short, long, has a bad header or fails its
  checksum (a snapshot renamed onto another key's name fails it: the key is
  hashed in) reads as ``None``; the entry is forgotten, the file removed and
  ``corrupt`` counted (as well as ``misses``): never wrong bytes.

NOTE: ``put`` never deletes another snapshot to make room: the eviction policy
ranks SSD snapshots and the caller deletes what it chooses (``footprint`` says
what a payload will take), then puts again.

NOTE (invariants, ``check``): ``used_bytes`` is the sum of the tracked files'
sizes (header included) and stays <= ``max_bytes``; each tracked file exists with
that size and the directory holds no other snapshot or temporary file. Accounting
uses the sizes written, never sizes read back, so it stays exact whatever
happens to a file.
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading

_SUFFIX = ".snap"
_TMP = ".tmp"
_MAGIC = b"SBST"
_VERSION = 1
_HEADER = struct.Struct("<4sHQ32s")  # magic, version, payload length, sha256(key, payload)

# NOTE: not hicache.segments.digest_of: that hashes one buffer, and the key must be
# bound into the checksum without copying a (large) snapshot to prepend it.


def _checksum(key: bytes, payload: bytes | memoryview) -> bytes:
    h = hashlib.sha256(struct.pack("<Q", len(key)))  # NOTE: length-prefixed: key/payload split is unambiguous
    h.update(key)
    h.update(payload)
    return h.digest()


def _encode(key: str) -> bytes:
    return key.encode("utf-8", "surrogatepass")


class SnapshotStore:
    """Snapshots in checked files under ``directory``, at most ``max_bytes`` on disk (see module docs)."""

    def __init__(self, directory: str, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError(f"need max_bytes >= 1, got {max_bytes}")
        self.directory = directory
        self.max_bytes = max_bytes
        os.makedirs(directory, exist_ok=True)
        # NOTE: snapshots of an earlier process are removed: a fresh prefix tree cannot name them
        for name in os.listdir(directory):
            if name.endswith(_SUFFIX) or name.endswith(_SUFFIX + _TMP):
                os.remove(os.path.join(directory, name))
        self._sizes: dict[str, int] = {}
        """Tracked key -> its file's size as written."""
        self._used = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.corrupt = 0

    @staticmethod
    def footprint(payload_bytes: int) -> int:
        """Bytes a snapshot of ``payload_bytes`` takes in the store (header included)."""
        return _HEADER.size + payload_bytes

    def path(self, key: str) -> str:
        return os.path.join(self.directory, hashlib.sha256(_encode(key)).hexdigest() + _SUFFIX)

    @property
    def used_bytes(self) -> int:
        return self._used

    @property
    def free_bytes(self) -> int:
        return self.max_bytes - self._used

    def __contains__(self, key: object) -> bool:
        return key in self._sizes

    def __len__(self) -> int:
        return len(self._sizes)

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._sizes)

    def put(self, key: str, data: bytes | memoryview) -> bool:
        """Store ``data`` under ``key``, replacing any snapshot there; ``False`` (nothing written) if it does not fit."""
        view = memoryview(data).cast("B")
        size = self.footprint(len(view))
        k = _encode(key)
        header = _HEADER.pack(_MAGIC, _VERSION, len(view), _checksum(k, view))
        with self._lock:
            if size > self.max_bytes or self._used - self._sizes.get(key, 0) + size > self.max_bytes:
                return False
            path = self.path(key)
            tmp = path + _TMP
            # NOTE: no fsync: files never outlive the process (removed at open), only a failed write must
            try:
                with open(tmp, "wb") as f:
                    f.write(header)
                    f.write(view)
                os.replace(tmp, path)
            except OSError:
                try:
                    os.remove(tmp)
                except OSError:
                    pass
                return False
            self._used += size - self._sizes.get(key, 0)
            self._sizes[key] = size
            return True

    def get(self, key: str) -> bytes | None:
        """The snapshot under ``key``; ``None`` if absent or its file fails a check (then forgotten)."""
        with self._lock:
            size = self._sizes.get(key)
            if size is None:
                self.misses += 1
                return None
            payload = self._read(key, size)
            if payload is None:
                self._forget(key)
                self.corrupt += 1
                self.misses += 1
                return None
            self.hits += 1
            return payload

    def _read(self, key: str, size: int) -> bytes | None:
        try:
            with open(self.path(key), "rb") as f:
                head = f.read(_HEADER.size)
                payload = f.read(size - _HEADER.size + 1)  # NOTE: one byte more: a long file is caught too
        except OSError:
            return None
        if len(head) != _HEADER.size:
            return None
        magic, version, length, digest = _HEADER.unpack(head)
        if magic != _MAGIC or version != _VERSION or self.footprint(length) != size or len(payload) != length:
            return None
        return payload if _checksum(_encode(key), payload) == digest else None

    def delete(self, key: str) -> bool:
        """Remove the snapshot under ``key``; whether one was stored."""
        with self._lock:
            if key not in self._sizes:
                return False
            self._forget(key)
            return True

    def _forget(self, key: str) -> None:
        self._used -= self._sizes.pop(key)
        try:
            os.remove(self.path(key))
        except OSError:
            pass

    def check(self) -> None:
        """Assert the invariants (module docs); tests call it."""
        with self._lock:
            assert self._used == sum(self._sizes.values()) <= self.max_bytes
            names = {os.path.basename(self.path(k)): s for k, s in self._sizes.items()}
            for name, size in names.items():
                assert os.path.getsize(os.path.join(self.directory, name)) == size, name
            on_disk = {n for n in os.listdir(self.directory) if n.endswith(_SUFFIX) or n.endswith(_TMP)}
            assert on_disk == set(names), on_disk ^ set(names)
