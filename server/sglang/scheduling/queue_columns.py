"""The waiting queue as columns, kept across scheduling passes.

``QueueColumnStore`` gives each waiting ``Req`` a row in a set of numpy
arrays (the fields of ``policies.scheduling.columns.QueueColumns``) when it is
first seen in the queue, and frees the row when it leaves. A pass costs one
scan of the queue (a C-level dict lookup per request) plus numpy gathers; a
``Req`` is read only when it arrives or when its cache hit changes
(``set_cached``). The same rows also cache ``RequestView`` objects for
policies that still order views.

NOTE: rows are keyed by the ``Req`` object's ``id``, and the store holds a
reference to every ``Req`` it has a row for, so an ``id`` cannot be reused by
another object while its row lives. A request that re-enters the queue
(retracted, or re-queued after a preemption) must be ``forget``-ed first, so it
gets a fresh row read from its new state (``SwitchboardScheduler`` does this in
``_add_request_to_queue``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from policies.scheduling.columns import INT_FIELDS, QueueColumns, frozen
from policies.views import RequestView
from server.sglang.scheduling.views import request_view


@dataclass
class SyncResult:
    """What one ``sync`` found."""

    rows: np.ndarray
    """Row of each queue position (int64)."""
    arrived: list[Any]
    """``Req`` objects seen for the first time (queue order)."""
    departed: list[Any]
    """``Req`` objects that left since the last pass."""


class QueueColumnStore:
    """Rows of waiting requests, kept across passes (see module docs)."""

    def __init__(self, capacity: int = 256) -> None:
        self._cap = 0
        self._int: dict[str, np.ndarray] = {name: np.zeros(0, np.int64) for name in INT_FIELDS}
        self._arrival_time = np.zeros(0)
        self._live = np.zeros(0, bool)
        self._has_features = np.zeros(0, bool)
        self._reqs: list[Any] = []
        self._views: list[RequestView | None] = []
        self._features: dict[int, np.ndarray] = {}
        self._row_of: dict[int, int] = {}
        self._free: list[int] = []
        self._last: tuple[list[Any], np.ndarray] | None = None
        self._grow(capacity)

    def __len__(self) -> int:
        return len(self._row_of)

    def _grow(self, capacity: int) -> None:
        old = self._cap
        for name, col in self._int.items():
            self._int[name] = np.concatenate((col, np.zeros(capacity - old, np.int64)))
        self._arrival_time = np.concatenate((self._arrival_time, np.zeros(capacity - old)))
        self._live = np.concatenate((self._live, np.zeros(capacity - old, bool)))
        self._has_features = np.concatenate((self._has_features, np.zeros(capacity - old, bool)))
        self._reqs.extend([None] * (capacity - old))
        self._views.extend([None] * (capacity - old))
        self._free.extend(range(capacity - 1, old - 1, -1))
        self._cap = capacity

    def sync(self, waiting_queue: list[Any]) -> SyncResult:
        """Rows of the queue's requests; adds rows for new ones, frees departed ones."""
        fast = self._sync_from_last(waiting_queue)
        if fast is not None:
            return fast
        rows_list, arrived = self._lookup(waiting_queue)
        rows = np.array(rows_list, dtype=np.int64)
        seen = np.zeros(self._cap, bool)
        seen[rows] = True
        departed = []
        for row in np.flatnonzero(self._live & ~seen).tolist():
            departed.append(self._reqs[row])
            self._release(row)
        return SyncResult(rows, arrived, departed)

    def remember(self, waiting_queue: list[Any] | None, rows: np.ndarray | None = None) -> None:
        """The queue as the caller leaves it this pass (``None``: unknown)."""
        # NOTE: a queue always comes with its rows (the callers); only ``None`` comes without.
        self._last = None if waiting_queue is None else (list(waiting_queue), cast(np.ndarray, rows))

    def _sync_from_last(self, waiting_queue: list[Any]) -> SyncResult | None:
        """The common case in O(changes): the queue is the one ``remember``-ed,
        minus a run of its head (admitted), plus arrivals at the end.

        NOTE: comparing the kept run is one C-level identity scan of the list;
        anything else (a removal from the middle, a re-sort) takes the full path.
        """
        last = self._last
        self._last = None
        if last is None or not waiting_queue:
            return None
        last_queue, last_rows = last
        try:
            m = last_queue.index(waiting_queue[0])
        except ValueError:
            m = len(last_queue)
        kept = len(last_queue) - m
        if kept > len(waiting_queue) or waiting_queue[:kept] != last_queue[m:]:
            return None
        tail_rows, arrived = self._lookup(waiting_queue[kept:])
        still_here = set(tail_rows)
        departed = []
        for req, row in zip(last_queue[:m], last_rows[:m].tolist()):
            if row not in still_here and self._reqs[row] is req:
                departed.append(req)
                self._release(row)
        rows = np.concatenate((last_rows[m:], np.array(tail_rows, dtype=np.int64)))
        return SyncResult(rows, arrived, departed)

    def _lookup(self, reqs: list[Any]) -> tuple[list[int], list[Any]]:
        rows_list: list[int | None] = list(map(self._row_of.get, map(id, reqs)))
        arrived = []
        if None in rows_list:
            for pos, row in enumerate(rows_list):
                if row is None:
                    req = reqs[pos]
                    rows_list[pos] = self._add(req)
                    arrived.append(req)
        return cast("list[int]", rows_list), arrived  # NOTE: every None was replaced above

    def forget(self, req: Any) -> None:
        """Drop ``req``'s row (it re-enters the queue: its state may have changed)."""
        row = self._row_of.get(id(req))
        if row is not None and self._reqs[row] is req:
            self._release(row)
            self._last = None  # NOTE: the remembered rows may name the freed one

    def set_cached(self, req: Any) -> None:
        """Record ``req``'s latest ``num_matched_prefix_tokens``."""
        row = self._row_of.get(id(req))
        if row is not None:
            self._int["num_cached_tokens"][row] = int(getattr(req, "num_matched_prefix_tokens", 0) or 0)

    def columns(self, rows: np.ndarray, *, now: float, processed_tokens: int, num_running: int,
                admit_limit: int | None, prefill_budget_tokens: float) -> QueueColumns:
        """The queue (``rows``, in queue order) as read-only columns."""
        cols = {name: frozen(col[rows]) for name, col in self._int.items()}
        feature_rows = np.zeros(0, np.int64)
        features = np.zeros((0, 0))
        if self._features:
            feature_rows = np.flatnonzero(self._has_features[rows])
            if len(feature_rows):
                features = np.stack([self._features[row] for row in rows[feature_rows].tolist()])
        return QueueColumns(arrival_time=frozen(self._arrival_time[rows]),
                            feature_rows=frozen(feature_rows), features=frozen(features), now=now,
                            processed_tokens=processed_tokens, num_running=num_running,
                            admit_limit=admit_limit, prefill_budget_tokens=prefill_budget_tokens, **cols)

    def views(self, waiting_queue: list[Any], rows: np.ndarray) -> tuple[RequestView, ...]:
        """``RequestView``s of the queue, rebuilt only where the hit changed."""
        cached_col = self._int["num_cached_tokens"]
        out = []
        for req, row in zip(waiting_queue, rows.tolist()):
            view = self._views[row]
            if view is None or view.num_cached_tokens != cached_col[row]:
                view = request_view(req)
                self._views[row] = view
            out.append(view)
        return tuple(out)

    def _add(self, req: Any) -> int:
        if not self._free:
            self._grow(2 * self._cap)
        row = self._free.pop()
        view = request_view(req)
        for name in INT_FIELDS:
            self._int[name][row] = getattr(view, name)
        self._arrival_time[row] = view.arrival_time
        if view.features is not None:
            self._features[row] = np.asarray(view.features, dtype=float)
            self._has_features[row] = True
        self._live[row] = True
        self._reqs[row] = req
        self._views[row] = view
        self._row_of[id(req)] = row
        return row

    def _release(self, row: int) -> None:
        req = self._reqs[row]
        del self._row_of[id(req)]
        self._reqs[row] = None
        self._views[row] = None
        self._live[row] = False
        if self._has_features[row]:
            self._has_features[row] = False
            del self._features[row]
        self._free.append(row)
