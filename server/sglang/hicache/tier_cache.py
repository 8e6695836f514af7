"""Placement below the device inside SGLang's HiCache: ``TierCache`` (``+tier=flatcake``).

SGLang's cache mode keeps every block it backs up in host memory *and* writes
it through to storage: storage is a superset of memory. A tier policy that
places blocks (``policies/tier``: ``MEMORY`` or ``SSD``, chosen once) needs
the two levels disjoint. ``TierCache`` is SGLang's ``UnifiedRadixCache`` with
three hooks, registered as the radix cache backend ``switchboard_tier``:

1. **Who used a block.** Every insert tags the nodes on its path with the
   request's owner (its session, or the request itself without one); a node a
   second owner inserts through is *shared* (a split's new parent inherits its
   child's tag).
2. **The home, once.** Under ``write_back`` a block is backed up when it
   leaves the device; once its host copy is acknowledged SGLang asks to write
   it to storage (``write_backup_storage``). There the policy answers its home
   from a ``PlacementView`` (the tag, ``SessionStats`` of the session, the free
   host slots, the SSD level): ``MEMORY`` is not written to storage;
   ``SSD`` is, and its host copy is released once storage acknowledges the
   write; ``BOTH`` is SGLang's own behaviour.
3. **Host copies of SSD blocks released.** After each poll of SGLang's
   HiCache events (``check_hicache_events``, once per scheduler step), an
   acknowledged ``SSD`` block's host copy is freed: the whole node when it is a host-only leaf, the host layer only when the node is
   on the device again. A block read back from storage (a prefetch) is on SSD
   already: its host copy is freed once it is on the device (never before: the
   request is about to load it). A storage prefetch may anchor below a
   prefix still on the device (``is_backuped``: SGLang's gate expects a
   write-through prefix).

4. **Demotion** (``TierNeeds.demote``, ``+tier=exclusive``): a memory-home
   leaf that host memory evicts is first written to storage, synchronously
   (every path that drops a host leaf goes through the tree core's
   ``_evict_host_leaf``, wrapped on this cache's core); a block read back from
   storage moves up to memory: its pages are discarded from the store (which
   needs a store that can forget: ``tier.storage=segments``).

What it shows (``switchboard_tier_*`` counters): tokens homed in memory and
on SSD, tokens demoted, host copies released, tokens read back from storage, and an audit
gauge, ``switchboard_tier_both_levels_tokens``: host-held tokens whose pages
storage also holds (in-flight writes and ``BOTH`` homes excluded), recomputed
from the tree and the storage backend itself after a change, at most once a
second and at most 1% of the scheduler's time. It is 0 when memory and SSD are disjoint.

NOTE (invariants): a node's home is decided once (``homes``); a ``MEMORY``
home is never written to storage; an ``SSD`` home's host copy is only a copy
in flight (until the storage ack) or a read-back staging (until it is on the
device). One TP rank (the CPU path); several ranks would need the decisions
under SGLang's ``rank_consensus``. The Python tree core is forced: the hooks
read its nodes.
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass
from typing import Any

from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang.srt.mem_cache.unified_cache.unified_tree_core_interface import DemoteResult
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

from policies.tier import Home, PlacementView, TierHostConfig, TierPolicy, check_home
from policies.tier.sessions import SessionStats
from server.sglang.cache.metrics import prometheus_counter, prometheus_gauge

logger = logging.getLogger(__name__)

#: The audit runs at most this often (seconds), after something changed.
AUDIT_INTERVAL_S = 1.0
#: ... and at most this share of the scheduler's time: the next audit waits this many times the last one's duration.
AUDIT_COST_RATIO = 100.0
#: The KV component whose host copies the tier places (the hooks read the Python core's nodes).
FULL = ComponentType.FULL


@dataclass
class _Owners:
    first: str
    session: str | None
    shared: bool = False


@dataclass
class Placement:
    """What ``TierCache`` asks its policy with: the policy, session facts, the SSD level."""

    policy: TierPolicy
    stats: SessionStats
    host: TierHostConfig


class TierCache(UnifiedRadixCache):  # type: ignore[misc]  # SGLang is untyped
    """SGLang's unified radix cache with a tier policy's placement (see module docs)."""

    placement: Placement | None = None

    def attach(self, placement: Placement) -> None:
        """Start placing with ``placement`` (before the first request)."""
        self.placement = placement
        self.owners: dict[int, _Owners] = {}
        self.homes: dict[int, Home] = {}
        #: node id -> whether the whole node may go (written SSD home) or only its host layer (read back)
        self.release: dict[int, bool] = {}
        self._owner: tuple[str | None, str] | None = None
        self._anonymous = itertools.count()
        self._ssd_tokens = 0
        self._dirty, self._audited_at, self._audit_every = False, 0.0, AUDIT_INTERVAL_S
        self.demotes = bool(placement.policy.needs.demote)
        if self.demotes:
            evict_leaf = self.tree_core._evict_host_leaf

            def demoting(node: Any, *args: Any, **kwargs: Any) -> Any:
                self._demote_to_ssd(node)
                return evict_leaf(node, *args, **kwargs)

            # NOTE: every path that drops a host leaf's KV (SGLang's host eviction, our releases) goes here
            self.tree_core._evict_host_leaf = demoting
        pool = self.cache_controller.mem_pool_host
        self._ssd_capacity = int(placement.host.ssd_gb * 1e9 // max(1, int(pool.size_per_token)))
        self._counters = {home: prometheus_counter(f"switchboard_tier_{home.value}_home_tokens",
                                                   f"KV tokens the tier policy homed in {home.value}")
                          for home in Home}
        self._released = prometheus_counter("switchboard_tier_host_copies_released_tokens",
                                            "Host copies of SSD-home KV freed once on SSD (or on the device)")
        self._demoted = prometheus_counter("switchboard_tier_demoted_tokens",
                                           "Memory-home KV written to SSD as host memory evicted it (demote)")
        self._restored = prometheus_counter("switchboard_tier_ssd_read_tokens",
                                            "KV tokens read back from the SSD level into host memory")
        self._audits = prometheus_counter("switchboard_tier_audits", "Audits of the levels' disjointness run")
        self._both = prometheus_gauge("switchboard_tier_both_levels_tokens",
                                      "Host-held KV tokens whose pages storage also holds (BOTH homes and "
                                      "in-flight writes excluded): 0 when memory and SSD are disjoint")
        logger.info("switchboard tier cache: %s places blocks below the device (SSD level %d tokens)",
                    type(placement.policy).__name__, self._ssd_capacity)

    # ---------------------------------------------------------------- owners
    def checkpoint_into_tree(self, req: Any, *, up_to: int, **kwargs: Any) -> Any:
        session = getattr(req, "session_id", None)
        self._owner = (session, session or f"rid:{req.rid}")
        try:
            return super().checkpoint_into_tree(req, up_to=up_to, **kwargs)
        finally:
            self._owner = None

    def insert(self, params: Any) -> Any:
        result = super().insert(params)
        if self.placement is not None and not self.disable and params.key is not None and len(params.key):
            session, owner = self._owner or (params.session_id,
                                             params.session_id or f"insert:{next(self._anonymous)}")
            self._tag(params.key, session, owner)
        return result

    def _tag(self, key: Any, session: str | None, owner: str) -> None:
        for node, _, _ in self.tree_core._walk_span(key, len(key)):
            tag = self.owners.get(node.id) or self._inherit(node)
            if tag is None:
                self.owners[node.id] = _Owners(owner, session)
            elif tag.first != owner:
                tag.shared = True
        if len(self.owners) > 2 * len(self.tree_core._node_arena) + 1024:
            live = self.tree_core._node_arena
            self.owners = {nid: t for nid, t in self.owners.items() if nid in live}
            self.homes = {nid: h for nid, h in self.homes.items() if nid in live}

    def _inherit(self, node: Any) -> _Owners | None:
        """A split's new parent (a node first seen with a child already seen): the child's tag,
        home and release (a split node's parts keep its owners and its levels; the child kept its id)."""
        for child in node.children.values():
            tag = self.owners.get(child.id)
            if tag is not None:
                self.owners[node.id] = copy = _Owners(tag.first, tag.session, tag.shared)
                if child.id in self.homes:
                    self.homes[node.id] = self.homes[child.id]
                if child.id in self.release:
                    self.release[node.id] = self.release[child.id]
                return copy
        return None

    # ------------------------------------------------------------------ homes
    def write_backup_storage(self, node_id: Any) -> None:
        if self.placement is None or not self.enable_storage:
            super().write_backup_storage(node_id)
            return
        home = self._home(node_id)
        if home is Home.MEMORY:
            # NOTE: never written to storage; a copy already there is stale (the block was recomputed
            # after its last demotion or SSD home): a store that can forget drops it, as the simulator does
            self._discard_from_ssd(self.tree_core.node_by_id(node_id))
            return
        if home is Home.NONE:
            self.release.setdefault(node_id, True)
            return
        if home is Home.BOTH:
            super().write_backup_storage(node_id)
            return
        self._group_by_session(node_id)
        super().write_backup_storage(node_id)
        self.release[node_id] = True
        self._dirty = True

    def _group_by_session(self, node_id: Any) -> None:
        """Tell a store that groups pages (``segment_backend.SegmentStorage.group``) whose session
        this SSD block's pages belong to: a session's blocks lie together in its own segments."""
        group = getattr(self.cache_controller.storage_backend, "group", None)
        tag = self.owners.get(node_id)
        node = self.tree_core.node_by_id(node_id)
        if group is not None and tag is not None and tag.session is not None and node.hash_value:
            group(list(node.hash_value), tag.session)

    def _home(self, node_id: Any) -> Home:
        home = self.homes.get(node_id)
        if home is not None:
            return home
        assert self.placement is not None
        node = self.tree_core.node_by_id(node_id)
        tag = self.owners.get(node_id) or self._inherit_down(node)
        session = tag.session if tag else None
        tokens, turns, last_reply = self.placement.stats.of(session)
        prefix, parent = 0, node.parent
        while parent is not None and parent.key is not None:
            prefix, parent = prefix + len(parent.key), parent.parent
        pool = self.cache_controller.mem_pool_host
        view = PlacementView(
            tokens=max(1, len(node.key)), prefix_tokens=prefix, shared=bool(tag and tag.shared),
            session_id=session, session_tokens=tokens, session_turns=max(1, turns), last_reply_tokens=last_reply,
            host_free_tokens=int(pool.available_size()), host_capacity_tokens=int(pool.size),
            ssd_free_tokens=max(0, self._ssd_capacity - self._ssd_tokens), ssd_capacity_tokens=self._ssd_capacity,
            now=time.perf_counter())
        home = self.homes[node_id] = check_home(self.placement.policy.place(view), view)
        if home in (Home.SSD, Home.BOTH):
            self._ssd_tokens += len(node.key)
        self._counters[home].inc(len(node.key))
        return home

    def _inherit_down(self, node: Any) -> _Owners | None:
        while node is not None:
            tag = self.owners.get(node.id)
            if tag is not None or not node.children:
                return tag
            node = next(iter(node.children.values()))
        return None

    # ------------------------------------------------------------- read back
    def is_backuped(self, node_id: Any) -> bool:
        """SGLang's scheduler asks this of a match's anchor before it prefetches from storage
        (``Scheduler._prefetch_kvcache``; nothing else in the scheduler asks it).

        NOTE: stock cache mode writes through, so an anchor that is not backed up means a miss.
        Under ``write_back`` a node still on the device is not backed up, yet its pages' keys (a
        hash chain from the root, set when the node was made) are known and its continuation may
        be on SSD: a device anchor with keys is a valid anchor (SGLang pins a device-only anchor
        under ``write_back``, and a prefetched block is a host-only child, as an evicted leaf is)."""
        if super().is_backuped(node_id):
            return True
        return self.placement is not None and self.tree_core.get_last_hash_value(node_id) is not None

    def _handle_prefetch_result(self, operation: Any) -> Any:
        entry = self.ongoing_prefetch.get(operation.handle)
        out = super()._handle_prefetch_result(operation)
        if self.placement is None or entry is None or operation.completed_tokens <= 0:
            return out
        anchor, key = entry[0], entry[1]
        for node in self._walk_from(self.tree_core.node_by_id(anchor), key[:operation.completed_tokens]):
            home = self.homes.setdefault(node.id, Home.SSD)  # NOTE: it came from SSD
            if home is Home.SSD and not self.demotes:
                self.release.setdefault(node.id, False)
            elif home is Home.SSD:
                # NOTE: exclusive: the block moves up to memory (a move, not a copy): its SSD copy goes
                self._discard_from_ssd(node)
        self._restored.inc(operation.completed_tokens)
        self._dirty = True
        return out

    def _walk_from(self, node: Any, key: Any) -> list[Any]:
        page, nodes = self.tree_core.page_size, []
        while len(key) > 0:
            child = node.children.get(key.child_key(page))
            if child is None:
                break
            matched = child.key.match(key, page_size=page)
            if matched == 0:
                break
            nodes.append(child)
            node, key = child, key[matched:]
        return nodes

    # ---------------------------------------------------------------- demote
    def _demote_to_ssd(self, node: Any) -> None:
        """Write a memory-home leaf's pages to storage before host memory drops them (``needs.demote``).

        NOTE: synchronous: the backup thread reads host pages later, and a freed page may hold
        another block's KV by then (the digest, taken at write, would not catch it)."""
        if self.homes.get(node.id) is not Home.MEMORY or not node.hash_value:
            return
        storage = self.cache_controller.storage_backend
        host = node.component_data[FULL].host_value
        if storage is None or host is None:
            return
        # NOTE: the copy SGLang's controller makes for a generic store (HiCacheController._generic_page_set),
        # done here, on the scheduler's thread, before the pages are freed
        pool, page = self.cache_controller.storage_host_pool, self.tree_core.page_size
        pages = [pool.get_data_page(int(host[i * page]), flat=True) for i in range(len(node.hash_value))]
        if storage.batch_set(list(node.hash_value), pages):
            self.homes[node.id] = Home.SSD
            self._ssd_tokens += len(node.key)
            self._demoted.inc(len(node.key))
            self._dirty = True

    def _discard_from_ssd(self, node: Any) -> None:
        """Forget ``node``'s pages on SSD (a store without ``discard`` keeps them: the audit counts them);
        the block's home is memory from now on."""
        discard = getattr(self.cache_controller.storage_backend, "discard", None)
        if discard is not None and node.hash_value:
            discard(list(node.hash_value))
            self.homes[node.id] = Home.MEMORY
            self._dirty = True

    # --------------------------------------------------------------- release
    def check_hicache_events(self) -> None:
        super().check_hicache_events()
        if self.placement is None:
            return
        if self.release:
            self._release_host_copies()
        if self._dirty and time.monotonic() - self._audited_at >= self._audit_every:
            self._audit()

    def _release_host_copies(self) -> None:
        """Free the host copy of every released-home node that no write or load still needs."""
        core, in_flight = self.tree_core, self._writing()
        result, freed, progress = DemoteResult(), 0, True
        while progress:  # NOTE: a parent becomes a host leaf once its children went
            progress = False
            for node_id, whole in list(self.release.items()):
                node = core._node_arena.get(node_id)
                data = None if node is None else node.component_data[FULL]
                if data is None or data.host_value is None:
                    del self.release[node_id]
                    continue
                if node_id in in_flight or node.write_through_pending_id is not None:
                    continue
                tokens = len(data.host_value)
                if data.value is not None:
                    if not core._can_reclaim_full_host_duplicate(node):
                        self.release[node_id] = True  # NOTE: loaded: once off the device again it may go whole
                        continue
                    core._release_full_host_duplicate(node, result.tracker, result.device_frees,
                                                      result.host_frees, cache_actions=result.cache_actions)
                    core.full_host_duplicates.pop(node_id, None)
                elif whole and core._is_host_leaf(node):
                    core._evict_host_leaf(node, result.tracker, result.device_frees, result.host_frees,
                                          cache_actions=result.cache_actions)
                else:
                    continue
                del self.release[node_id]
                freed, progress = freed + tokens, True
        if freed:
            self._apply_eviction_result(result)
            self._released.inc(freed)
            self._dirty = True

    def _writing(self) -> set[Any]:
        """Nodes whose storage write SGLang has not acknowledged yet."""
        return {node_id for node_id, _ in self.ongoing_backup.values()}

    # ----------------------------------------------------------------- audit
    def both_levels_tokens(self) -> int:
        """Host-held tokens whose pages the storage backend holds too (``BOTH`` homes and writes in flight
        excluded): the audit of the levels' disjointness, read from the tree and the backend."""
        storage = self.cache_controller.storage_backend
        if storage is None:
            return 0
        page, in_flight = self.tree_core.page_size, self._writing()
        self._offenders: list[str] = []
        total, stack = 0, list(self.tree_core.root_node.children.values())
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            if node.component_data[FULL].host_value is None or not node.hash_value:
                continue
            if node.id in in_flight or self.homes.get(node.id) is Home.BOTH:
                continue
            held = page * sum(1 for key in node.hash_value if storage.exists(key))
            if held and len(self._offenders) < 3:
                self._offenders.append(f"node {node.id} ({len(node.key)} tokens, home "
                                       f"{getattr(self.homes.get(node.id), 'value', None)}, "
                                       f"{'host only' if node.evicted else 'on the device too'})")
            total += held
        return total

    def _audit(self) -> None:
        start = time.monotonic()
        both = self.both_levels_tokens()
        self._dirty, self._audited_at = False, time.monotonic()
        # NOTE: a big tree (or a store whose exists() is a file lookup) audits less often, never
        # more than 1/AUDIT_COST_RATIO of the scheduler's time
        self._audit_every = max(AUDIT_INTERVAL_S, AUDIT_COST_RATIO * (self._audited_at - start))
        self._both.set(both)
        self._audits.inc()
        if both:
            logger.warning("switchboard tier cache: %d host-held tokens are also on SSD: %s", both,
                           "; ".join(self._offenders))
