"""The waiting queue: prefix matches, in-batch duplicates and the policy's order.

Mirrors SGLang's ``SchedulePolicy.calc_priority`` on a persistent list (its
``waiting_queue``): new and retracted requests are appended; each pass the
order policy re-sorts the list, and the next pass starts from that order.

Matches are kept current incrementally instead of re-matching every request
every pass (same result, far cheaper): a waiting request is re-matched only
when the cache inserted the block right after its match or evicted the node
its match ends in (``NOTE``: with prefix-chained ids nothing else can change a
match).

Which host behaviour applies (as the server runs them):

==================== =================================== ================================
order policy         who sorts                           waiting prefixes touched
==================== =================================== ================================
none (built-in)      nobody: arrival/append order        every 32nd pass, first 128 (only
native fcfs, lof     the pure policy                     where the eviction order asks:
                                                         ``needs.refresh_waiting``, e.g. LRU)
native lpm, hrrn     the pure policy; while > 128 wait   every pass; while > 128 wait as
                     nobody (``sim.native_queue_limit``)  the row above
any other            the pure policy                     every pass
==================== =================================== ================================
"""

from __future__ import annotations

import math
from collections import defaultdict
from operator import attrgetter

import numpy as np

from bench.sim.cache import Node, PrefixCache
from bench.sim.columns import SimColumnStore
from bench.sim.request import SimRequest
from policies.scheduling import OrderDecision, QueueView, SchedulingPolicy, check_permutation
from policies.scheduling.columns import RanksColumns, check_ranking

#: SGLang's WAITING_QUEUE_PREFIX_MATCH_MAX: native lpm/hrrn act as FCFS above it.
QUEUE_MATCH_LIMIT = 128
#: SGLang's WAITING_PREFIX_REFRESH_INTERVAL (passes between LRU refreshes).
REFRESH_INTERVAL = 32
#: SGLang policies that sort without looking at the cache.
CACHE_AGNOSTIC = frozenset({"fcfs", "lof", "random", "routing-key"})
#: Native policies that fall back to FCFS for long queues.
QUEUE_LIMITED = frozenset({"lpm", "hrrn"})

_view_of = attrgetter("view")
_seq_of = attrgetter("seq")
_rid_of = attrgetter("rid")


def _discard(index: dict[int, set[SimRequest]], key: int, r: SimRequest) -> None:
    members = index.get(key)
    if members is not None:
        members.discard(r)
        if not members:
            del index[key]


class WaitingQueue:
    """SGLang's waiting queue with an order policy (see module docs)."""

    def __init__(self, cache: PrefixCache, policy: SchedulingPolicy | None, *,
                 in_batch_threshold: int = 32, native_queue_limit: bool = True,
                 touch: bool = True, refresh_waiting: bool = True) -> None:
        self.cache = cache
        self.policy = policy
        native = policy.needs.sglang_native if policy is not None else "fcfs"
        self.cache_aware = policy is not None and native not in CACHE_AGNOSTIC
        """SGLang matches (and touches) the whole queue each pass."""
        self.queue_limited = native_queue_limit and native in QUEUE_LIMITED
        self.touch_every_pass = touch and self.cache_aware
        self.refresh_waiting = touch and refresh_waiting
        """The eviction order asks for SGLang's periodic refresh (``EvictionNeeds.refresh_waiting``)."""
        self.touch_periodic = self.refresh_waiting and not self.cache_aware
        self.needs_paths = policy is not None and policy.needs.prefix_path
        # NOTE: `is not None` first: mypy takes isinstance(Optional[Protocol], other Protocol) to be never true.
        self._ranker = policy if policy is not None and isinstance(policy, RanksColumns) else None
        """The policy, when it ranks columns (as the server does)."""
        self.store = SimColumnStore() if self._ranker is not None else None
        """Rows of the waiting requests when the policy ranks columns."""
        self.split = self.touch_every_pass or self.needs_paths
        self.threshold = in_batch_threshold
        self.items: list[SimRequest] = []
        self._by_rid: dict[str, SimRequest] = {}
        self._stale: list[SimRequest] = []
        """Requests whose view must be rebuilt before the next decision."""
        self._dirty: set[SimRequest] = set()
        """Requests whose match may be out of date."""
        self._short: set[SimRequest] = set()
        """Requests the in-batch prefix rule looks at (short match, has blocks)."""
        self._on_block: dict[int, set[SimRequest]] = defaultdict(set)
        self._ending_at: dict[int, set[SimRequest]] = defaultdict(set)
        self._passes = 0
        cache.on_insert = self._on_insert
        cache.on_evict = self._on_evict

    def __len__(self) -> int:
        return len(self.items)

    # ----------------------------------------------------------- membership
    def append(self, r: SimRequest) -> None:
        """A new or retracted request joins the back of the queue."""
        self._mark_dirty(r)
        self._invalidate(r)
        self.items.append(r)
        self._by_rid[r.rid] = r
        if self.store is not None:
            self.store.add(r)

    def remove(self, gone: list[SimRequest]) -> None:
        """Requests that left the queue (admitted to prefill, or rejected)."""
        for r in gone:
            self._untrack(r)
            self._short.discard(r)
            self._dirty.discard(r)
            del self._by_rid[r.rid]
            if self.store is not None:
                self.store.remove(r)
        k = len(gone)
        if all(a is b for a, b in zip(self.items[:k], gone)):
            del self.items[:k]  # NOTE: the prefill walk admits a prefix of the queue
        else:
            out = set(gone)
            self.items = [r for r in self.items if r not in out]

    def _invalidate(self, r: SimRequest) -> None:
        r.view = None
        if self.policy is not None:  # NOTE: without a policy no view is ever built
            self._stale.append(r)

    # --------------------------------------------------------------- matches
    def _mark_dirty(self, r: SimRequest) -> None:
        r.dirty = True
        self._dirty.add(r)

    def _on_insert(self, first_block: int) -> None:
        for r in self._on_block.pop(first_block, ()):
            self._mark_dirty(r)

    def _on_evict(self, node: Node) -> None:
        for r in self._ending_at.pop(node.id, ()):
            self._mark_dirty(r)

    def _untrack(self, r: SimRequest) -> None:
        if r.blocks is not None and r.match_blocks < len(r.blocks):
            _discard(self._on_block, r.blocks[r.match_blocks], r)
        if r.match_node is not None:
            _discard(self._ending_at, r.match_node.id, r)
        if r.waiter_node is not None:
            self.cache.remove_waiter(r.waiter_node)
            r.waiter_node = None

    def rematch(self, r: SimRequest, now: float, touch: bool, split: bool) -> None:
        """Match ``r`` against the cache now and index what could change it."""
        self._untrack(r)
        k, node = self.cache.match(r.blocks, now, touch=touch, split=split)
        r.match_blocks, r.match_node = k, node
        r.match_tokens = self.cache.tokens_of(k, r.input_len)
        if r.blocks is not None and k < len(r.blocks):
            self._on_block[r.blocks[k]].add(r)
        if node.parent is not None:
            self._ending_at[node.id].add(r)
        if self.touch_every_pass:
            self.cache.add_waiter(node)
            r.waiter_node = node
        r.dirty = False
        self._dirty.discard(r)
        if r.blocks is not None and r.match_tokens <= self.threshold:
            self._short.add(r)
        else:
            self._short.discard(r)
            r.dup = False
        self._invalidate(r)

    # ------------------------------------------------------------------ pass
    def sort(self, now: float, processed_tokens: int, num_running: int,
             has_deferred: bool = False, bounds: tuple[int | None, float] = (None, math.inf)) -> None:
        """One ``calc_priority``: match, flag duplicates, order (deferred last).

        ``bounds`` = (admit limit, prefill token budget) of this pass's walk: how
        much of the order a columnar policy must follow its full rules for (the
        server's ``head_bounds``). NOTE: ignored while requests are deferred:
        they move behind the order, so the walk may reach past the head.
        """
        if not self.items:
            return
        fallback = self.queue_limited and len(self.items) > QUEUE_MATCH_LIMIT
        if self.policy is not None and not fallback:
            touch = self.touch_every_pass
            # NOTE: arrival order, deterministic; split order changes no match.
            for r in sorted(self._dirty, key=_seq_of):
                self.rematch(r, now, touch=touch, split=self.split)
            if touch:
                self.cache.touch_waiting_prefixes(now)
            if self._short:
                self._flag_duplicates()
            if self.needs_paths:
                self._refresh_paths()
            self._decide(self.policy, now, processed_tokens, num_running,
                         (None, math.inf) if has_deferred else bounds)
        if self.touch_periodic or (fallback and self.refresh_waiting):
            # NOTE: SGLang's _touch_waiting_prefixes: passes that did not match the
            # queue refresh the first 128 prefixes every 32nd time, head touched last.
            self._passes += 1
            if (self._passes - 1) % REFRESH_INTERVAL == 0:
                for r in reversed(self.items[:QUEUE_MATCH_LIMIT]):
                    self.cache.match(r.blocks, now, touch=True, split=False)
        if has_deferred:
            self.items.sort(key=lambda r: r.deferred)  # NOTE: stable: deferred go last

    def _flag_duplicates(self) -> None:
        """SGLang's in-batch prefix rule, on leading blocks (see ``in_batch_duplicate``)."""
        bs = self.cache.block_size
        if self.threshold < 0 or bs <= 0:
            return
        need = max(1, math.ceil(self.threshold / bs))
        seen: set[int] = set()
        short = self._short
        for r in self.items:
            if r not in short:
                continue
            b = r.blocks
            assert b is not None
            dup = False
            if len(b) >= need and self.cache.tokens_of(need, r.input_len) >= self.threshold:
                dup = b[need - 1] in seen  # NOTE: chained ids: last block names the prefix
            if not dup:
                seen.update(b[:need])
            if dup != r.dup:
                r.dup = dup
                self._invalidate(r)

    def _refresh_paths(self) -> None:
        items = self.items
        for r, path in zip(items, self.cache.prefix_paths([r.match_node for r in items])):
            if path != r.path:
                r.path = path
                self._invalidate(r)

    def _decide(self, policy: SchedulingPolicy, now: float, processed_tokens: int, num_running: int,
                bounds: tuple[int | None, float]) -> None:
        if self._ranker is not None:
            self._rank(self._ranker, now, processed_tokens, num_running, bounds)
            return
        for r in self._stale:
            if r.view is None:
                r.make_view()
        self._stale.clear()
        queue = QueueView(requests=tuple(map(_view_of, self.items)), now=now,
                          processed_tokens=processed_tokens, num_running=num_running)
        decision = policy.order(queue)
        self._apply(queue, decision)

    def _rank(self, ranker: RanksColumns, now: float, processed_tokens: int, num_running: int,
              bounds: tuple[int | None, float]) -> None:
        """The columnar path: rows rewritten for changed requests, one ``rank``."""
        store = self.store
        assert store is not None
        for r in self._stale:
            if r.row >= 0:  # NOTE: requests that left since have no row
                store.write(r)
        self._stale.clear()
        items = self.items
        columns = store.columns(items, now=now, processed_tokens=processed_tokens, num_running=num_running,
                                admit_limit=bounds[0], prefill_budget_tokens=bounds[1])
        positions = np.asarray(ranker.rank(columns))
        check_ranking(len(items), positions)
        moved = np.flatnonzero(positions != np.arange(len(items)))
        if len(moved):  # NOTE: only the span that moved is rebuilt (usually the head)
            lo, hi = int(moved[0]), int(moved[-1]) + 1
            items[lo:hi] = [items[i] for i in positions[lo:hi].tolist()]

    def _apply(self, queue: QueueView, decision: OrderDecision) -> None:
        """Reorder by ``decision``; a non-permutation raises as ``check_permutation``."""
        order = decision.order
        if order == tuple(map(_rid_of, self.items)):
            return  # NOTE: same order (identical rid objects compare by identity: fast)
        try:
            items = list(map(self._by_rid.__getitem__, order))
        except (KeyError, TypeError):
            items = []
        if len(items) != len(self.items) or len(set(order)) != len(order):
            check_permutation(queue, decision)
            raise ValueError("scheduling decision is not a permutation of the queue")
        self.items = items
