"""The gap tree: one pure radix tree of cached prefixes for both hosts.

Pure (stdlib and ``policies`` only): no SGLang, no torch, no clock. The server
binds it to SGLang (``server/sglang/cache/gap_cache.py``: token keys, KV slot
tensors, the allocator, the KV pool's offload API), the simulator to block
ids and token counts (``bench/sim/cache.py``).

============== =========================================================
module         holds
============== =========================================================
``tree``       ``GapTree``: match, split, insert, fill, locks, waiters, evict
``kv``         what happens to a node's KV: freed (host, hollow, removed), pruned, filled
``node``       ``Node``, ``Inserted``; ``first_gap``, ``merge_ranges`` over paths
``eviction``   ``EvictionQueue``: evictable nodes ranked by the policy
``host``       ``HostTier``: which hollow nodes the host tier holds
``bindings``   what a host implements: ``KeyIndex``, ``Slots``, ``HostCopies``
``keys``       ``PagedKeys`` (walks ``RadixKey``-like keys), ``TokenKey``
``check``      the invariants, asserted in one walk
============== =========================================================
"""

from __future__ import annotations

from radix.bindings import HostCopies, KeyIndex, Slots
from radix.eviction import EvictionQueue
from radix.host import HostTier
from radix.keys import PagedKey, PagedKeys, TokenKey
from radix.node import Inserted, Key, Node, first_gap, merge_ranges, unadopted
from radix.tree import GapTree

__all__ = ["EvictionQueue", "GapTree", "HostCopies", "HostTier", "Inserted", "Key", "KeyIndex", "Node",
           "PagedKey", "PagedKeys", "Slots", "TokenKey", "first_gap", "merge_ranges", "unadopted"]
