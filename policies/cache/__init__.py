"""Eviction: which cached prefix blocks to free first.

Contract (the host's side):
  * The cache decides which blocks are *eligible* (not locked by a running
    request; for a tail-only radix tree, leaves only) and asks the policy to
    rank them. It frees eligible blocks in ascending rank until it has freed
    enough tokens, re-ranking blocks that become eligible on the way (a parent
    whose last child went).
  * Locked blocks are never offered and never freed.
  * ``NOTE`` (hollowing, optional): a policy whose ``needs`` say
    ``EvictionNeeds(interior=True)`` may be offered *interior* blocks too, not
    only leaves. Freeing an interior block makes it *hollow*: its token keys
    stay in the tree, its KV slots are freed, and a later match through it
    recomputes only that gap (at its original positions) and reuses the
    cached tail after it. Hosts that cannot hold gaps refuse such a policy
    (never a silent fallback to tail-first eviction).
  * ``NOTE`` (snapshots, optional): a hybrid model (attention layers beside
    recurrent ones) caches, besides KV, recurrent-state *snapshots*: the state
    after a prefix, fixed in size, usable only whole (a match resumes from the
    deepest snapshot on its path whose KV is cached). A policy whose ``needs``
    say ``EvictionNeeds(snapshots=True)`` is offered snapshots as items in the
    same ranking as KV blocks (``BlockView.item``), with what each frees
    (``nbytes``) and what its loss costs (``recompute_tokens``). Only hosts
    serving a hybrid model can; the others refuse it, naming the field.
  * A host-memory tier for freed segments is a property of the deployment,
    not of an eviction order: it is the host's setting
    (``cache.host_tier_tokens``, ``compose.schema.CacheHostConfig``).

Contract (the policy's side):
  * ``rank`` is a pure function of the view: the smallest rank is evicted
    first. Ranks are tuples of numbers compared lexicographically (SGLang's
    ``EvictionStrategy.get_priority`` shape).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

#: An eviction rank: compared lexicographically, smallest evicted first.
EvictionRank = tuple[float, ...]

#: What a ranked item is: a block of KV, or a recurrent-state snapshot (hybrid models).
ItemKind = Literal["kv", "state"]
#: Where a ranked item lives.
ItemTier = Literal["device", "host", "ssd"]


@dataclass(frozen=True, slots=True)
class BlockView:
    """One cached block (a radix-tree node: a run of tokens sharing one path)."""

    block_id: int
    """Host id of the block, stable while it is cached."""
    num_tokens: int
    """Tokens (KV slots) the block holds."""
    prefix_len: int
    """Tokens on the path before this block (its start position)."""
    last_access: float
    """Host time of the last hit or insert (a logical counter inside SGLang)."""
    created: float
    """Host time the block was inserted (same clock as ``last_access``)."""
    hit_count: int = 0
    """Times a request matched through this block."""
    priority: int = 0
    """Request priority the block was inserted with (SGLang's node priority)."""
    num_children: int = 0
    """Cached continuations of this block."""
    num_sessions: int = 1
    """Distinct sessions whose requests went through the block (``NOTE``: a
    later addition; hosts that do not track sessions leave it 1)."""
    item: ItemKind = "kv"
    """``"kv"``: the block's KV; ``"state"``: the recurrent-state snapshot taken
    after the block's last token (offered only to ``needs.snapshots``)."""
    nbytes: int = 0
    """Bytes freed at this item's tier if it goes (``0``: the host does not say;
    hosts offering snapshots always say)."""
    recompute_tokens: int = 0
    """Tokens a later request recomputes because this item went: for a KV block,
    its tokens; for a snapshot, the distance back to the previous snapshot kept
    on its path (or to the root), or, when going means moving to a slower tier,
    the restore's read time in prefill tokens (``0``: the host does not say)."""
    tier: ItemTier = "device"
    """Where the item lives now (what going frees)."""


@dataclass(frozen=True)
class EvictionNeeds:
    """What an eviction policy needs from its host.

    NOTE: the one place a host learns a policy's optional needs (its
    ``needs`` attribute)."""

    interior: bool = False
    """Interior blocks may be offered and freed, leaving hollow nodes (gaps)
    that a later request recomputes; the host must hold gaps (see module
    docs)."""
    snapshots: bool = False
    """Recurrent-state snapshots are offered in the same ranking as KV blocks
    (``BlockView.item``); only a host serving a hybrid model can (see module
    docs)."""
    refresh_waiting: bool = False
    """The host refreshes the recency (``last_access``) of the cached prefixes
    of the first 128 waiting requests every 32nd queue order, head last, so an
    order keyed on recency keeps what the queue is about to reuse (SGLang's
    ``SchedulePolicy._touch_waiting_prefixes``, which stock SGLang runs for its
    LRU only). NOTE: a pass that prefix-matched the whole queue touched it
    already and refreshes nothing."""
    sglang_strategy: str | None = None
    """The eviction strategy of SGLang's own this order reproduces (a name of
    ``sglang.srt.mem_cache.utils``' strategy table: the baselines a verdict
    compares a technique with); ``None``: an order of Switchboard's own."""


@runtime_checkable
class EvictionPolicy(Protocol):
    """Ranks eligible cached blocks; the smallest rank is freed first."""

    needs: EvictionNeeds
    """What the policy needs from its host (``EvictionNeeds``)."""

    def rank(self, block: BlockView) -> EvictionRank:
        """Eviction rank of ``block`` (see module docs)."""
        ...
