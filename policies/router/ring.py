"""SMG's consistent-hash ring (``model_gateway/src/worker/hash_ring.rs``), shared
by ``prefix_hash`` and ``consistent_hashing``.

* 150 virtual nodes per *unique* registered URL; vnode ``i`` of ``url`` sits at
  ``u64_le(blake3(f"{url}#{i}")[:8])``; entries sorted by position.
* Lookup of a key string: ``p = u64_le(blake3(key)[:8])``, start at the first
  entry with position ``>= p`` (``bisect_left``), walk clockwise with
  wrap-around, return the first URL that is healthy.

NOTE: the ring holds every *registered* worker, healthy or not (SMG rebuilds
it on registration, not on health changes), so a worker that turns unhealthy
hands its arcs to its clockwise neighbours and gets them back when it
recovers. Its content does not depend on the worker list's order.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence

from blake3 import blake3

#: Virtual nodes per worker URL (``VIRTUAL_NODES_PER_WORKER``).
VIRTUAL_NODES = 150


def ring_position(key: str) -> int:
    """A key's position on the ring: the first 8 bytes of its blake3 digest, little-endian."""
    return int.from_bytes(blake3(key.encode()).digest()[:8], "little")


class HashRing:
    """An immutable ring over a set of URLs (see module docs)."""

    __slots__ = ("urls", "_positions", "_owners")

    def __init__(self, urls: Sequence[str]) -> None:
        unique = list(dict.fromkeys(urls))  # NOTE: a repeated URL keeps its first occurrence only
        entries = sorted((ring_position(f"{url}#{i}"), k) for k, url in enumerate(unique)
                         for i in range(VIRTUAL_NODES))
        self.urls: tuple[str, ...] = tuple(unique)
        """Unique URLs, in first-seen order."""
        self._positions = [p for p, _ in entries]
        self._owners = [k for _, k in entries]

    def find(self, key: str, healthy: Callable[[str], bool]) -> str | None:
        """The first URL clockwise from ``key``'s position that ``healthy`` accepts."""
        n = len(self._positions)
        if n == 0:
            return None
        start = bisect_left(self._positions, ring_position(key))
        checked: set[int] = set()
        for i in range(n):
            owner = self._owners[(start + i) % n]
            if owner in checked:
                continue
            checked.add(owner)
            if healthy(self.urls[owner]):
                return self.urls[owner]
            if len(checked) == len(self.urls):
                break
        return None


class RingCache:
    """Rings by tuple of registered URLs, for one policy instance.

    NOTE: per instance, never module-level; bounded (a fleet changes rarely,
    so a few rings cover any replay)."""

    __slots__ = ("_rings", "limit")

    def __init__(self, limit: int = 8) -> None:
        self._rings: dict[tuple[str, ...], HashRing] = {}
        self.limit = limit

    def ring(self, urls: tuple[str, ...]) -> HashRing:
        """The ring over ``urls`` (built on first use)."""
        ring = self._rings.get(urls)
        if ring is None:
            if len(self._rings) >= self.limit:
                self._rings.pop(next(iter(self._rings)))
            ring = self._rings[urls] = HashRing(urls)
        return ring
