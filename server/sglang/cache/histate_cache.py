"""HiState inside SGLang: a hybrid model's unified radix cache whose recurrent-state snapshots
go to SSD instead of away, evicted with KV from one queue (``+cache=histate``).

SGLang's ``UnifiedRadixCache`` keeps a hybrid model's prefix as KV (component
``FULL``) and, at some nodes, a recurrent-state slot (``MAMBA``); a match ends at
the deepest node holding a state, and stock eviction walks one LRU list per
component: a state at an inner node is dropped (a *tombstone*: the KV stays,
but no match can end there), a leaf's state goes with the leaf's KV. Here:

* **one queue** (``_evict_components``): the KV leaves and the device states, each
  ranked by the policy over its ``BlockView`` (``histate_items``), popped lowest
  first while a component is short; a KV leaf helps a KV shortfall (and a state
  shortfall, if it holds a state), a state only a state shortfall;
* **demotion**: a device state that goes is written to the snapshot store
  (``snapshots.SnapshotStore``, one checked file each) and tombstoned; when the
  store is full, its lowest-ranked snapshots are deleted to make room;
* **restore** (``_match_tree``): an admission match (``cow_mamba``) whose path
  runs, KV on the device, to a node deeper than its deepest live state whose
  snapshot is on SSD, reads it into a fresh state slot first; SGLang's own match
  then ends there. A snapshot that fails its checksum is a miss (recompute);
* a node that leaves the tree takes its SSD snapshot with it.

NOTE: invariant: a node id names at most one snapshot; ids are never reused and a
split's child keeps its id and its state (SGLang), so a snapshot stays the
state at its node's end.
NOTE: SGLang's ``mamba_max_states_per_path`` cap drops states on insert without
asking the queue; those are not demoted.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable
from typing import Any

from sglang.srt.mem_cache.base_prefix_cache import EvictParams, MatchPrefixParams
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang.srt.mem_cache.unified_cache.components import base as component_base
from sglang.srt.mem_cache.unified_cache.components.base import EvictLayer
from sglang.srt.mem_cache.unified_cache.unified_tree_core_interface import BaseEvictionResult
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

from policies.cache import BlockView, EvictionPolicy
from server.sglang.cache.histate_items import (
    AccessClock,
    ItemSizes,
    PathFacts,
    device_state_view,
    kv_leaf_view,
    ssd_state_view,
)
from server.sglang.cache.metrics import prometheus_counter
from server.sglang.cache.snapshots import SnapshotStore
from server.sglang.cache.state_codec import StateCodec

log = logging.getLogger("switchboard.histate")

FULL, MAMBA = ComponentType.FULL, ComponentType.MAMBA


class HiStateCache(UnifiedRadixCache):  # type: ignore[misc]  # SGLang is untyped
    """SGLang's unified radix cache with HiState's queue, demotion and restore (module docs)."""

    def attach(self, policy: EvictionPolicy, store: SnapshotStore, read_tokens: int) -> None:
        """Start ranking with ``policy`` and demoting to ``store`` (called once, after SGLang built it)."""
        pool = self.req_to_token_pool.mamba_pool
        self._policy = policy
        self._store = store
        self._codec = StateCodec(pool)
        self._pool = pool
        self._clock = AccessClock()
        kv = self.token_to_kv_pool_allocator.get_kvcache()
        k_bytes, v_bytes = kv.get_kv_size_bytes()
        self._sizes = ItemSizes((k_bytes + v_bytes) / (kv.size + kv.page_size), self._codec.nbytes, read_tokens)
        self._store_fits = store.footprint(self._codec.nbytes) <= store.max_bytes
        """Whether the store can take a snapshot at all (else a state that goes is lost)."""
        self._on_ssd: dict[int, int] = {}
        """Node id -> bytes its snapshot takes in the store."""
        self._restoring: int | None = None
        """The node whose snapshot is being read back (never deleted to make room meanwhile)."""
        self._counters = {name: prometheus_counter(f"switchboard_histate_snapshots_{name}", doc) for name, doc in (
            ("written", "Recurrent-state snapshots demoted to the SSD store"),
            ("read", "Snapshots read back from the SSD store into a state slot (SSD hits)"),
            ("missed", "Snapshot reads that failed their checks (recomputed instead)"),
            ("deleted", "SSD snapshots deleted to make room for others"))}
        core = self.tree_core
        remove = core._remove_leaf_from_parent

        def removed(node: Any) -> None:
            self._forget(node.id)
            remove(node)

        core._remove_leaf_from_parent = removed  # NOTE: every deletion of a node passes here
        log.info("switchboard: HiState cache ranks KV and %d-byte state snapshots by %s, SSD store %s (%d bytes)",
                 self._codec.nbytes, policy, store.directory, store.max_bytes)

    # ------------------------------------------------------------ bookkeeping
    def _tick(self) -> None:
        self._clock.sample(component_base._LAST_ACCESS_TIME_COUNTER_FLOAT, time.monotonic())

    def _forget(self, node_id: int) -> None:
        if self._on_ssd.pop(node_id, None) is not None:
            self._store.delete(str(node_id))

    def reset(self) -> None:
        super().reset()
        store = getattr(self, "_store", None)  # NOTE: SGLang's __init__ resets before attach
        if store is not None:
            for node_id in list(self._on_ssd):
                self._forget(node_id)

    # ------------------------------------------------------------------ views
    def _has_state(self, node: Any) -> bool:
        return node.component_data[MAMBA].value is not None or node.id in self._on_ssd

    def _facts(self, node: Any) -> PathFacts:
        back, prefix, found = len(node.key), 0, False
        parent = node.parent
        while parent is not None and parent.key is not None and parent is not self.tree_core.root_node:
            prefix += len(parent.key)
            if not found:
                if self._has_state(parent):
                    found = True
                else:
                    back += len(parent.key)
            parent = parent.parent
        return PathFacts(int(node.id), len(node.key), prefix, back, self._clock.seconds(node.last_access_time),
                         self._clock.seconds(node.creation_time), int(node.hit_count), len(node.children))

    def _kv_view(self, node: Any, wanted: frozenset[ComponentType]) -> BlockView:
        return kv_leaf_view(self._facts(node), self._sizes, node.component_data[MAMBA].value is not None,
                            node.id in self._on_ssd, count_kv=FULL in wanted, count_state=MAMBA in wanted)

    def _state_view(self, node: Any) -> BlockView:
        return device_state_view(self._facts(node), self._sizes, node.id in self._on_ssd or self._store_fits)

    # -------------------------------------------------------------- the queue
    def _evict_components(
        self,
        request_by_type: dict[ComponentType, int],
        tracker: dict[ComponentType, int],
        available_size_targets: dict[ComponentType, tuple[ComponentType, int]] | None = None,
        *,
        allocation_reclaim_satisfied: Callable[[], bool] | None = None,
    ) -> None:
        targets = available_size_targets or {}

        def reached(ct: ComponentType) -> bool:
            if allocation_reclaim_satisfied is not None:
                return allocation_reclaim_satisfied()
            target = targets.get(ct)
            return target is not None and self._component_available_size(target[0]) >= target[1]

        def short(ct: ComponentType) -> bool:
            # NOTE: SGLang's stopping rule (UnifiedRadixCache._evict_components): a target met, or,
            # unless a KV allocation names its target (then it runs to it), the requested amount freed
            wanted = request_by_type.get(ct, 0)
            to_target = ct == FULL and wanted > 0 and ct in targets
            return not reached(ct) and (to_target or tracker[ct] < wanted)

        self._tick()
        core = self.tree_core
        wanted = frozenset(ct for ct in (FULL, MAMBA) if short(ct))
        while wanted:
            # NOTE: an item is ranked by the bytes it frees in the pools still short (SGLang keeps KV
            # and states in separate pools: freed KV does not help a state shortfall); the queue is
            # rebuilt when that set changes
            heap = self._queue(wanted)
            now = wanted
            while heap and now == wanted:
                _, _, item, node = heapq.heappop(heap)
                if item == "kv":
                    if node not in core.evictable_device_leaves:
                        continue  # NOTE: gone, or no longer a leaf, since it was queued
                    if FULL not in wanted and node.component_data[MAMBA].value is None:
                        continue
                    parent = node.parent
                    self._evict_device_leaf(node.id, tracker)
                    if parent in core.evictable_device_leaves:
                        heapq.heappush(heap, (self._policy.rank(self._kv_view(parent, wanted)), parent.id, "kv", parent))
                else:
                    cd = node.component_data[MAMBA]
                    if cd.value is None or cd.lock_ref > 0 or node.id not in core._node_arena:
                        continue
                    self._demote(node, tracker)
                now = frozenset(ct for ct in (FULL, MAMBA) if short(ct))
            if now == wanted:
                return  # NOTE: nothing left to free for what is short
            wanted = now

    def _queue(self, wanted: frozenset[ComponentType]) -> list[tuple[tuple[float, ...], int, str, Any]]:
        """The items that free something in the ``wanted`` pools, ranked (a heap)."""
        core = self.tree_core
        heap: list[tuple[tuple[float, ...], int, str, Any]] = []
        for leaf in core.evictable_device_leaves:
            if FULL in wanted or leaf.component_data[MAMBA].value is not None:
                heap.append((self._policy.rank(self._kv_view(leaf, wanted)), leaf.id, "kv", leaf))
        if MAMBA in wanted:
            for node in list(core.lru_lists[MAMBA].cache.values()):
                cd = node.component_data[MAMBA]
                if cd.value is not None and cd.lock_ref == 0:
                    heap.append((self._policy.rank(self._state_view(node)), node.id, "state", node))
        heapq.heapify(heap)
        return heap

    def _demote(self, node: Any, tracker: dict[ComponentType, int]) -> None:
        """Write ``node``'s state to the store (if not there already), then tombstone it."""
        cd = node.component_data[MAMBA]
        if node.id not in self._on_ssd:
            data = self._codec.encode(self._pool.get_cpu_copy(cd.value))
            size = self._store.footprint(len(data))
            if self._make_room(size, keep=node.id) and self._store.put(str(node.id), data):
                self._on_ssd[node.id] = size
                self._counters["written"].inc()
        result = BaseEvictionResult()
        mamba = self.tree_core.components_by_type[MAMBA]
        self.tree_core._evict_component_and_detach_lru(
            node, mamba, result.device_frees, result.host_frees, result.cache_actions,
            target=EvictLayer.DEVICE, tracker=result.tracker)
        self.tree_core._update_evictable_leaf_sets(node)
        self._apply_eviction_result(result)
        self._accumulate_tracker(tracker, result.tracker)

    def _make_room(self, need: int, keep: int) -> bool:
        """Delete the lowest-ranked SSD snapshots until ``need`` bytes are free."""
        if need > self._store.max_bytes:
            return False
        if self._store.free_bytes >= need:
            return True
        arena = self.tree_core._node_arena
        ranked = sorted((self._policy.rank(ssd_state_view(self._facts(arena[i]), size)), i)
                        for i, size in self._on_ssd.items() if i not in (keep, self._restoring) and i in arena)
        for _, node_id in ranked:
            if self._store.free_bytes >= need:
                break
            self._forget(node_id)
            self._counters["deleted"].inc()
        return self._store.free_bytes >= need

    # ---------------------------------------------------------------- restore
    def _match_tree(self, params: MatchPrefixParams) -> Any:
        if params.cow_mamba and params.req is not None and not self.disable and self._on_ssd:
            self._tick()
            node = self._restorable(params)
            if node is not None:
                self._restore(node)
        return super()._match_tree(params)

    def _restorable(self, params: MatchPrefixParams) -> Any:
        """The deepest node on the key's path, its KV on the device all the way, whose snapshot
        is on SSD and deeper than any live state; ``None`` if there is none."""
        key = params.key.page_aligned(self.page_size)
        found = None
        for node, _, matched in self.tree_core._walk_span(key, len(key)):
            if matched < len(node.key) or node.component_data[FULL].value is None:
                break
            if node.component_data[MAMBA].value is not None:
                found = None
            elif node.id in self._on_ssd:
                found = node
        return found

    def _restore(self, node: Any) -> None:
        """Read ``node``'s snapshot into a fresh state slot and attach it (a miss: nothing)."""
        # NOTE: read (and check) first: making a slot free may demote a state on this path into a
        # full store, whose room-making must not delete the snapshot being restored
        data = self._store.get(str(node.id))
        if data is None:
            self._on_ssd.pop(node.id, None)
            self._counters["missed"].inc()
            log.warning("switchboard: HiState snapshot of node %d failed its checks; recomputing", node.id)
            return
        lock = self.inc_lock_ref(node.id)  # NOTE: before any eviction: the path must survive it
        self._restoring = node.id
        try:
            allocator = self.req_to_token_pool.mamba_allocator
            slot = allocator.alloc(1)
            if slot is None:
                self.evict_for_alloc(EvictParams(num_tokens=0, mamba_num=1))
                slot = allocator.alloc(1)
            if slot is None:
                return
            self._pool.load_cpu_copy(self._codec.decode(data), slot)
            self.tree_core.set_component_device_value(node.id, MAMBA, slot)
            self._counters["read"].inc()
        finally:
            self._restoring = None
            self.dec_lock_ref(node.id, lock.to_dec_params())
