"""The simulated prefix cache of a hybrid model: KV plus recurrent-state snapshots
(``sim.hybrid.enabled``; SGLang 0.5.23's unified radix cache, its CPU and GPU strategies).

A hybrid model resumes a cached prefix only from a snapshot of its recurrent state taken
at the prefix's end. ``HybridCache`` keeps the KV in the gap tree as ``PrefixCache`` does and
the snapshots beside it, keyed by the block they end (block ids are prefix-chained, so a
block names its prefix):

* **where snapshots are taken**: at every insert's end (a prompt's end, a chunk's end:
  ``no_buffer``), and every ``snapshot_every_tokens`` of a prompt (``extra_buffer``);
* **match**: the KV match cut back to the deepest block holding a snapshot (any tier), and
  before any gap (KV no level holds: recomputing it needs the state at its start);
* **levels**: ``device_states`` slots on the device (their own pool, as in SGLang); SGLang's
  host state pool (``host_states``, least recently used dropped first) for a
  per-component order; the snapshot store (``cache.snapshot_gb``) for an order whose
  needs say ``snapshots`` (``+cache=histate``); KV that leaves the device goes to SGLang's host
  KV pool when there is one (``sim.hicache_tokens``, HiCache as it serves a hybrid model: the
  node stays, hollow, its snapshots with it; a request through it restores the attention
  layers' KV at ``sim.host_bandwidth_gbs``);
* **what goes**: a KV node that leaves the tree (the device, then the host pool if any)
  takes its snapshots along. A device
  snapshot that must make room goes, for a per-component order, least recently used
  first, to the host pool or away; for a snapshot order, lowest rank first
  (``policies.cache`` views: ``item="state"``), to the store, whose own lowest-ranked
  snapshots are deleted when it is full. Such an order also ranks KV by what its loss
  costs (``recompute_tokens``: the distance back to the previous snapshot, 0 for KV
  past the last snapshot on its path, which resumes nothing);
* **reading back**: a request admitted at a snapshot on host or SSD first copies it to
  the device, charged ``state_mb`` at the level's bandwidth before its prefill pass
  (``take_resume_s``).

``NOTE`` (simplifications, kinder to stock SGLang): a device state at a KV leaf is
dropped alone (SGLang drops the leaf's KV with it); SGLang's cap on states per path
drops the shallowest device states past it. Marconi (``sim.hybrid.marconi``) is
modelled by its admission and its state eviction; its KV stays least recently used
(its one tree evicts KV and states by the same score).
``NOTE`` (invariants, ``check``): every snapshot's block is in the tree; the levels'
counts match the records and stay within their slots; with a snapshot order, every
evictable KV node is queued at the rank its current snapshots give it.
"""

from __future__ import annotations

import dataclasses
from array import array
from dataclasses import dataclass

from bench.schema import HybridSimConfig
from bench.sim.cache import Node, PrefixCache
from policies.cache import BlockView, EvictionPolicy, ItemTier
from radix.eviction import EvictionQueue

DEVICE: ItemTier = "device"
HOST: ItemTier = "host"
SSD: ItemTier = "ssd"


@dataclass
class Snapshot:
    """One recurrent-state snapshot: the state after its block."""

    tier: ItemTier
    created: float
    last_access: float


class HybridCache(PrefixCache):
    """KV in the gap tree, snapshots beside it (see module docs)."""

    def __init__(self, block_size: int, policy: EvictionPolicy, hybrid: HybridSimConfig, kv_bytes_per_token: float,
                 store_bytes: int, read_tokens: int, host_gbs: float, touch_waiting: bool = False,
                 host_kv_tokens: int = 0) -> None:
        super().__init__(block_size, policy, touch_waiting=touch_waiting, host_tier_tokens=host_kv_tokens,
                         host_bandwidth_gbs=host_gbs)
        self.hybrid = hybrid
        self.ranked = policy.needs.snapshots
        """A snapshot order (``needs.snapshots``): states ranked, demoted to the store."""
        self.state_bytes = int(hybrid.state_mb * 1e6)
        self.kv_bytes_per_token = kv_bytes_per_token * hybrid.kv_fraction
        self.read_tokens = read_tokens
        self.slots = {DEVICE: hybrid.device_states, HOST: 0 if self.ranked else hybrid.host_states,
                      SSD: store_bytes // self.state_bytes if self.ranked else 0}
        self.read_s = {HOST: self.state_bytes / (host_gbs * 1e9),
                       SSD: self.state_bytes / (hybrid.ssd_read_gbs * 1e9)}
        # NOTE: PrefixCache binds the tree's match as an attribute (no frame on the hot path)
        self.match = self.hybrid_match
        self.snapshots: dict[int, Snapshot] = {}
        self.at: dict[ItemTier, dict[int, Snapshot]] = {DEVICE: {}, HOST: {}, SSD: {}}
        """The snapshots of each level (``snapshots`` split by tier)."""
        self.reads = {HOST: 0, SSD: 0}
        """Snapshots read back from each level (``take_resume_s``)."""
        self.dropped = 0
        """Snapshots lost (no level took them, or their KV left)."""
        if self.ranked:
            queue = self.tree.queue
            base = EvictionQueue.view

            def view(n: Node) -> BlockView:
                return self._kv_view(base(queue, n), n)

            queue.view = view  # type: ignore[method-assign]  # NOTE: KV ranks see the snapshots

    # ------------------------------------------------------------- matching
    def hybrid_match(self, key: array[int] | None, now: float, touch: bool = True,
                     split: bool = True) -> tuple[int, Node]:
        """The KV match cut back to its deepest snapshot (``(0, root)`` without one)."""
        if not key:
            return 0, self.root
        k, node = self.tree.match(key, now, touch=False, split=False)
        if k and self.may_have_gaps:
            k = self._before_gap(node, k)
        snaps = self.snapshots
        while k > 0 and key[k - 1] not in snaps:
            k -= 1
        if k == 0:
            return 0, self.root
        if touch:
            snaps[key[k - 1]].last_access = now
        return self.tree.match(key[:k], now, touch=touch, split=split)

    def _before_gap(self, node: Node, k: int) -> int:
        """``k`` cut back to the start of the first gap on the path to ``node`` (a hollow node whose
        KV no level holds): a hybrid model cannot recompute KV in the middle of a prefix without the
        state at the gap's start, so a snapshot past a gap resumes nothing."""
        for n in self.tree.path_to(node):
            if n.hollow and not n.on_host:
                return min(k, n.start)
        return k

    def restore_s(self, tokens: int, kv_bytes_per_token: float) -> float:
        """Seconds to copy ``tokens`` of KV back from SGLang's host pool: only the attention
        layers' (``kv_fraction`` of ``kv_bytes_per_token``)."""
        return tokens * self.kv_bytes_per_token / (self.host_bandwidth_gbs * 1e9)

    def take_resume_s(self, blocks: array[int] | None, k: int, now: float) -> float:
        """A request admitted at ``blocks[:k]`` resumes from its snapshot: one on host or SSD
        is copied to the device first; the seconds that takes (0 on the device)."""
        if not blocks or k == 0:
            return 0.0
        b = blocks[k - 1]
        snap = self.snapshots[b]  # NOTE: the admitted path is locked: its snapshot cannot have gone
        snap.last_access = now
        if snap.tier == DEVICE:
            return 0.0
        tier = snap.tier
        self.reads[tier] += 1
        self._promote(b, snap, now)
        return self.read_s[tier]

    def _promote(self, b: int, snap: Snapshot, now: float) -> None:
        """Bring snapshot ``b`` up to the device. NOTE: it leaves its level first, so the device's
        victim may take its slot; if the device has no room, it goes back, or, that slot taken, away."""
        tier = snap.tier
        del self.at[tier][b]
        if self._room(DEVICE, now, keep=b):
            tier = DEVICE
        snap.tier = tier
        self.at[tier][b] = snap
        if len(self.at[tier]) > self.slots[tier]:
            self._drop(b)

    # ------------------------------------------------------------ inserting
    def insert(self, blocks: array[int], input_len: int, now: float, inserted_blocks: int = 0,
               priority: int = 0, session: str | None = None, final: bool = True) -> tuple[Node, int]:
        # NOTE: Marconi's branch point: KV this prefill recomputed (cached, but past its snapshot) up
        # to where its path leaves the tree; the state there was computed on the way
        branch = 0
        if self.hybrid.marconi and blocks:
            branch, _ = self.tree.match(blocks, now, touch=False, split=False)
        node, new = super().insert(blocks, input_len, now, inserted_blocks, priority, session, final)
        if self.hybrid.marconi:
            if inserted_blocks < branch < len(blocks):
                self._take(blocks, branch, now)
            if final:
                self._take(blocks, len(blocks), now)
            return node, new
        every = self.hybrid.snapshot_every_tokens // self.block_size if self.hybrid.snapshot_every_tokens else 0
        if every:
            for i in range(inserted_blocks + 1, len(blocks)):
                if i % every == 0:
                    self._take(blocks, i, now)
        self._take(blocks, len(blocks), now)
        return node, new

    def _take(self, blocks: array[int], i: int, now: float) -> None:
        """The state after ``blocks[:i]`` (just computed, so on the device) is snapshotted."""
        b = blocks[i - 1]
        snap = self.snapshots.get(b)
        if snap is not None:
            snap.last_access = now
            if snap.tier != DEVICE:
                self._promote(b, snap, now)
            return
        if not self._room(DEVICE, now, keep=b):
            return  # NOTE: every device state is held by an admitted path: this one is not kept
        snap = Snapshot(DEVICE, now, now)
        self.snapshots[b] = self.at[DEVICE][b] = snap
        self._changed(b)
        if self.hybrid.max_states_per_path > 0:
            self._cap_path(blocks, i)
        if self.on_insert is not None:
            # NOTE: a waiting request's match may now reach this snapshot: it stopped at a block after
            # the previous snapshot on this path (the queue indexes requests by their first unmatched block)
            j = i - 1
            while j > 0 and blocks[j - 1] not in self.snapshots:
                j -= 1
            for c in blocks[j:i]:
                self.on_insert(c)

    def _cap_path(self, blocks: array[int], i: int) -> None:
        on_path = [b for b in blocks[:i] if (s := self.snapshots.get(b)) is not None and s.tier == DEVICE]
        for b in on_path[: max(0, len(on_path) - self.hybrid.max_states_per_path)]:
            self._drop(b)

    # ----------------------------------------------------------- the levels
    def _room(self, tier: ItemTier, now: float, keep: int) -> bool:
        """Make a slot free at ``tier`` (moving or dropping others); whether one is."""
        while len(self.at[tier]) >= self.slots[tier]:
            victim = self._victim(tier, keep)
            if victim is None:
                return False
            self._evict_snapshot(victim, now)
        return True

    def _victim(self, tier: ItemTier, keep: int) -> int | None:
        if self.hybrid.marconi:
            return self._marconi_victim(tier, keep)
        best, best_key = None, None
        for b, snap in self.at[tier].items():
            if b == keep:
                continue
            node = self._node_of.get(b)
            if node is not None and node.lock_ref > 0:
                continue  # NOTE: an admitted request may resume from it
            key = self.policy.rank(self.state_view(b, snap)) if self.ranked else (snap.last_access, snap.created)
            if best_key is None or key < best_key:
                best, best_key = b, key
        return best

    def _marconi_victim(self, tier: ItemTier, keep: int) -> int | None:
        """Lowest min-max normalised recency + alpha x normalised FLOP efficiency (Marconi)."""
        found = [(b, s) for b, s in self.at[tier].items()
                 if b != keep and not ((n := self._node_of.get(b)) is not None and n.lock_ref > 0)]
        if not found:
            return None
        recency = [s.last_access for _, s in found]
        # NOTE: every state has one size: FLOPs saved per byte goes as the tokens it spares
        saved = [float(self._back_blocks(b)) for b, _ in found]

        def norm(xs: list[float]) -> list[float]:
            lo, hi = min(xs), max(xs)
            return [0.0 if hi == lo else (x - lo) / (hi - lo) for x in xs]

        alpha = self.hybrid.marconi_alpha
        scores = [r + alpha * f for r, f in zip(norm(recency), norm(saved), strict=True)]
        return found[min(range(len(found)), key=lambda i: (scores[i], recency[i]))][0]

    def _evict_snapshot(self, b: int, now: float) -> None:
        snap = self.snapshots[b]
        lower = {DEVICE: SSD if self.ranked else HOST, HOST: None, SSD: None}[snap.tier]
        if lower is not None and self.slots[lower] > 0 and self._room(lower, now, keep=b):
            self._move(b, snap, lower)
        else:
            self._drop(b)

    def _move(self, b: int, snap: Snapshot, tier: ItemTier) -> None:
        # NOTE: no re-rank: a KV node's cost counts snapshots on any level
        del self.at[snap.tier][b]
        snap.tier = tier
        self.at[tier][b] = snap

    def _drop(self, b: int, notify: bool = True) -> None:
        snap = self.snapshots.pop(b)
        del self.at[snap.tier][b]
        self.dropped += 1
        node = self._node_of.get(b)
        if notify and node is not None:
            self._changed(b)
            if self.on_evict is not None:
                self.on_evict(node)  # NOTE: requests whose match ends here match again

    def detached(self, node: Node) -> None:
        for b in node.key:
            if b in self.snapshots:
                self._drop(b, notify=False)
        super().detached(node)

    # ---------------------------------------------------------------- views
    def _back_blocks(self, b: int) -> int:
        """Blocks from the previous snapshot on ``b``'s path (or the root) through ``b``."""
        node = self._node_of[b]
        key, n = node.key, 1
        i = key.index(b)
        snaps = self.snapshots
        while True:
            for j in range(i - 1, -1, -1):
                if key[j] in snaps:
                    return n
                n += 1
            parent = node.parent
            if parent is None or parent.parent is None:
                return n
            node, key = parent, parent.key
            i = len(key)

    def state_view(self, b: int, snap: Snapshot) -> BlockView:
        """A snapshot as the order ranks it: on the device, demoted (one read) if the store can
        take one; in the store, deleted (the distance back)."""
        back = self._back_blocks(b) * self.block_size
        recompute = self.read_tokens if snap.tier == DEVICE and self.slots[SSD] > 0 else back
        return BlockView(block_id=b, num_tokens=self.block_size, prefix_len=0, last_access=snap.last_access,
                         created=snap.created, item="state", nbytes=self.state_bytes,
                         recompute_tokens=recompute, tier=snap.tier)

    def _kv_view(self, view: BlockView, n: Node) -> BlockView:
        """A KV node's view with what its loss costs: the distance back from its deepest
        snapshot, or nothing past the last one."""
        deepest = next((b for b in reversed(n.key) if b in self.snapshots), None)
        recompute = 0 if deepest is None else self._back_blocks(deepest) * self.block_size
        return dataclasses.replace(view, item="kv", nbytes=round(n.num_tokens * self.kv_bytes_per_token),
                                   recompute_tokens=recompute)

    def _changed(self, b: int) -> None:
        """Snapshot ``b`` came, went or moved: re-rank the KV whose cost it sets (its node and
        the nodes below, down to the next snapshot on each path)."""
        if not self.ranked:
            return
        start = self._node_of.get(b)
        stack = [start] if start is not None else []
        offer = self.tree.queue.offer
        while stack:
            n = stack.pop()
            offer(n)
            for child in n.children.values():
                if not any(c in self.snapshots for c in child.key):
                    stack.append(child)
                else:
                    offer(child)

    def report(self) -> dict[str, int]:
        """What the snapshot levels did (a run's ``meta.hybrid``)."""
        return {"snapshots_read_host": self.reads[HOST], "snapshots_read_ssd": self.reads[SSD],
                "snapshots_dropped": self.dropped,
                **{f"snapshots_at_end_{tier}": len(level) for tier, level in self.at.items()}}

    # ------------------------------------------------------------- integrity
    def check(self) -> None:
        super().check()
        for b, snap in self.snapshots.items():
            assert b in self._node_of, f"snapshot {b} outlived its KV"
            assert self.at[snap.tier].get(b) is snap
        assert sum(len(level) for level in self.at.values()) == len(self.snapshots)
        assert all(len(self.at[t]) <= self.slots[t] for t in (DEVICE, HOST, SSD)), \
            {t: len(level) for t, level in self.at.items()}
