"""What the snapshot cache ranks: its items as ``BlockView`` s, and the clock they are dated by
(no SGLang, no torch: the cache reads its nodes into ``PathFacts`` first).

A hybrid model's cache holds three kinds of item (``policies.cache`` NOTE on snapshots):

* a **KV leaf** on the device: going frees its KV (and its recurrent state, if it
  holds one, which is useless without the KV); a later request recomputes back
  to the previous snapshot on its path: ``recompute_tokens`` is that distance,
  or 0 when the leaf ends in no snapshot (its KV alone resumes nothing: a
  hybrid model resumes only from a whole state);
* a **device snapshot**: going moves it to the SSD store, so its loss costs one
  read (``read_tokens``, a host setting) while the store can take it, else the
  distance back;
* an **SSD snapshot**: going deletes it; its loss costs the distance back.

SGLang dates nodes with a logical counter (``get_and_increase_time_counter``),
not seconds, and a policy's time constants are seconds: ``AccessClock`` maps
counter values to the monotonic time at which the counter had reached them,
from samples the cache takes at each eviction and at each admission match
while the store holds snapshots (between samples a node reads as the earlier
sample's time: coarse, never out of order).

NOTE: invariant: ``AccessClock.seconds`` is monotone in the counter (samples
are appended in time order and the counter only grows), so ranks keep the
order of SGLang's own recency between items of one kind.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass

from policies.cache import BlockView, ItemKind, ItemTier


class AccessClock:
    """Monotonic seconds of SGLang's logical access counter (see module docs)."""

    def __init__(self, max_samples: int = 4096) -> None:
        self._counters: deque[float] = deque(maxlen=max_samples)
        self._times: deque[float] = deque(maxlen=max_samples)

    def sample(self, counter: float, now: float) -> None:
        """The counter stood at ``counter`` at monotonic time ``now``."""
        if self._counters and counter <= self._counters[-1]:
            return
        self._counters.append(counter)
        self._times.append(max(now, self._times[-1]) if self._times else now)

    def seconds(self, counter: float) -> float:
        """The time the counter reached ``counter``: the latest sample at or below it
        (the oldest sample's time for older counters; 0 before any sample)."""
        if not self._counters:
            return 0.0
        i = bisect.bisect_right(self._counters, counter)
        return self._times[max(i - 1, 0)]


@dataclass(frozen=True)
class PathFacts:
    """One node as the ranking needs it, read from SGLang's tree."""

    node_id: int
    tokens: int
    """Tokens of the node's own key."""
    prefix_len: int
    """Tokens on its path before it."""
    back_tokens: int
    """Tokens from the end of the nearest ancestor holding a snapshot (device or
    SSD; the root otherwise) to this node's end."""
    last_access: float
    """Seconds (``AccessClock``)."""
    created: float
    hit_count: int
    num_children: int


@dataclass(frozen=True)
class ItemSizes:
    """Bytes and read cost of the served model's items."""

    kv_bytes_per_token: float
    """KV of one token, all attention layers."""
    state_bytes: int
    """One recurrent-state snapshot (every recurrent layer)."""
    read_tokens: int
    """Prefill tokens one snapshot read from SSD is worth (``cache.snapshot_read_tokens``)."""


def _view(facts: PathFacts, item: ItemKind, tier: ItemTier, nbytes: int, recompute: int) -> BlockView:
    return BlockView(block_id=facts.node_id, num_tokens=facts.tokens, prefix_len=facts.prefix_len,
                     last_access=facts.last_access, created=facts.created, hit_count=facts.hit_count,
                     num_children=facts.num_children, item=item, nbytes=nbytes, recompute_tokens=recompute,
                     tier=tier)


def kv_leaf_view(facts: PathFacts, sizes: ItemSizes, has_device_state: bool, has_snapshot: bool,
                 count_kv: bool = True, count_state: bool = True) -> BlockView:
    """A device KV leaf: its KV (and device state) freed; its loss is the distance back, or
    nothing when it ends in no snapshot. ``count_kv``/``count_state``: whether the bytes it frees
    in that pool count (a host with separate pools counts only the pools it is short of)."""
    nbytes = (round(facts.tokens * sizes.kv_bytes_per_token) if count_kv else 0) + \
        (sizes.state_bytes if has_device_state and count_state else 0)
    recompute = facts.back_tokens if (has_device_state or has_snapshot) else 0
    return _view(facts, "kv", "device", nbytes, recompute)


def device_state_view(facts: PathFacts, sizes: ItemSizes, store_takes_it: bool) -> BlockView:
    """A device snapshot: demoted to SSD (one read) if the store can take it, else lost."""
    return _view(facts, "state", "device", sizes.state_bytes,
                 sizes.read_tokens if store_takes_it else facts.back_tokens)


def ssd_state_view(facts: PathFacts, stored_bytes: int) -> BlockView:
    """An SSD snapshot: deleted; its loss is the distance back."""
    return _view(facts, "state", "ssd", stored_bytes, facts.back_tokens)
