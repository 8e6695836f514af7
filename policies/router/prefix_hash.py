"""``+router=prefix_hash``: twin of SMG's ``prefix_hash`` (``policies/prefix_hash.rs``)."""

from __future__ import annotations

import struct

import xxhash

from policies.router import RouteDecision, RouterNeeds, RouteView, healthy_indices
from policies.router.pick import first_least_in_flight
from policies.router.ring import RingCache

#: Characters of routing text per token of prefix (``CHARS_PER_TOKEN``).
CHARS_PER_TOKEN = 4


class PrefixHashPolicy:
    """Hash the request's leading prefix onto the ring; spill past a load gate.

    Key bytes, first that exists: the routing key's UTF-8 bytes; the first
    ``prefix_token_count`` token ids as little-endian u32; the first
    ``4 * prefix_token_count`` characters of the routing text. ``h =
    xxh3_64(key bytes)``; the ring key is ``f"{h:016x}"``, looked up on the
    blake3 ring (``policies/router/ring.py``). A request with none of them
    goes to the least-loaded healthy worker.

    Load gate over the healthy workers (``total`` in flight, ``n`` workers):
    a worker passes if ``total == 0`` or its load is at most
    ``max(avg * load_factor, avg + balance_abs_threshold)`` with
    ``avg = (total + 1) / n``. The ring's target takes the request if it
    passes; otherwise the least-loaded healthy worker that passes (the first
    in list order among ties, as Rust's ``min_by_key``); if none passes, the
    target anyway.
    """

    def __init__(self, prefix_token_count: int = 256, load_factor: float = 1.25,
                 balance_abs_threshold: int = 10) -> None:
        """``prefix_token_count``: tokens hashed (``--prefix-token-count``);
        ``load_factor``: relative gate (``--prefix-hash-load-factor``);
        ``balance_abs_threshold``: absolute gate in requests
        (``--prefix-hash-balance-abs-threshold``)."""
        if prefix_token_count < 1:
            raise ValueError(f"prefix_token_count must be >= 1, got {prefix_token_count}")
        if load_factor < 1.0:
            raise ValueError(f"load_factor must be >= 1, got {load_factor}")
        if balance_abs_threshold < 0:
            raise ValueError(f"balance_abs_threshold must be >= 0, got {balance_abs_threshold}")
        self.prefix_token_count = prefix_token_count
        self.load_factor = load_factor
        self.balance_abs_threshold = balance_abs_threshold
        self.needs = RouterNeeds(gateway_policy="prefix_hash", gateway_flags=(
            ("--prefix-token-count", str(prefix_token_count)),
            ("--prefix-hash-load-factor", repr(float(load_factor))),
            ("--prefix-hash-balance-abs-threshold", str(balance_abs_threshold)),
        ))
        self._rings = RingCache()

    def key_bytes(self, view: RouteView) -> bytes | None:
        """The bytes SMG hashes for this request (``None``: nothing to hash)."""
        if view.routing_key is not None:
            return view.routing_key.encode()
        if view.token_ids:
            head = view.token_ids[:self.prefix_token_count]
            return struct.pack(f"<{len(head)}I", *head)
        if view.text:
            return view.text[:self.prefix_token_count * CHARS_PER_TOKEN].encode()
        return None

    def ring_key(self, view: RouteView) -> str | None:
        """The string placed on the ring: ``xxh3_64`` of ``key_bytes``, 16 lowercase hex digits."""
        data = self.key_bytes(view)
        return None if data is None else f"{xxhash.xxh3_64_intdigest(data):016x}"

    def load_ok(self, load: int, total: int, n: int) -> bool:
        """Whether a worker with ``load`` in flight passes the gate."""
        if total == 0 or n == 0:
            return True
        avg = (total + 1) / n
        return load <= max(avg * self.load_factor, avg + self.balance_abs_threshold)

    def route(self, view: RouteView) -> RouteDecision:
        healthy = healthy_indices(view)
        key = self.ring_key(view)
        if key is None:
            return RouteDecision(first_least_in_flight(view, healthy), "no_routing_key")
        by_url: dict[str, int] = {}
        for i in healthy:
            by_url.setdefault(view.workers[i].url, i)
        url = self._rings.ring(tuple(w.url for w in view.workers)).find(key, by_url.__contains__)
        assert url is not None  # NOTE: every healthy URL is on the ring
        target = by_url[url]
        total = sum(view.workers[i].in_flight for i in healthy)
        n = len(healthy)
        if self.load_ok(view.workers[target].in_flight, total, n):
            return RouteDecision(target, "ring_hit")
        passing = [i for i in healthy if self.load_ok(view.workers[i].in_flight, total, n)]
        return RouteDecision(first_least_in_flight(view, passing) if passing else target, "load_balance_walk")
