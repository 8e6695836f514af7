"""The simulator's waiting queue as columns, for policies that ``rank`` them.

The simulator's counterpart of ``server/sglang/scheduling/queue_columns.py``:
each waiting ``SimRequest`` owns a row of numpy arrays (the fields of
``policies.scheduling.columns.QueueColumns``) from the moment it joins the
queue until it leaves; a row is rewritten only when one of the request's
fields changes (the queue's stale list). A pass gathers the rows in queue
order: no ``RequestView`` is built and no Python loop runs over the queue
beyond one C-level attribute read per request.

NOTE: a row holds exactly what ``SimRequest.make_view`` would put in the view
(same fields, same values), so ``rank`` over these columns decides what
``order`` over the views decides.
"""

from __future__ import annotations

import math
from operator import attrgetter

import numpy as np

from bench.sim.request import SimRequest
from policies.scheduling.columns import INT_FIELDS, QueueColumns, frozen

_row_of = attrgetter("row")



class SimColumnStore:
    """Rows of waiting requests (see module docs)."""

    def __init__(self, capacity: int = 1024) -> None:
        self._cap = 0
        self._int = {name: np.zeros(0, np.int64) for name in INT_FIELDS}
        self._arrival_time = np.zeros(0)
        self._has_features = np.zeros(0, bool)
        self._features = np.zeros((0, 0))
        self._free: list[int] = []
        self._grow(capacity)

    def _grow(self, capacity: int) -> None:
        old = self._cap
        extra = capacity - old
        for name, col in self._int.items():
            self._int[name] = np.concatenate((col, np.zeros(extra, np.int64)))
        self._arrival_time = np.concatenate((self._arrival_time, np.zeros(extra)))
        self._has_features = np.concatenate((self._has_features, np.zeros(extra, bool)))
        self._features = np.concatenate((self._features, np.zeros((extra, self._features.shape[1]))))
        self._free.extend(range(capacity - 1, old - 1, -1))
        self._cap = capacity

    def add(self, r: SimRequest) -> None:
        """Give ``r`` (joining the queue) a row and write it."""
        if not self._free:
            self._grow(2 * self._cap)
        r.row = self._free.pop()
        self.write(r)

    def remove(self, r: SimRequest) -> None:
        """``r`` left the queue: its row is free."""
        self._free.append(r.row)
        r.row = -1

    def write(self, r: SimRequest) -> None:
        """Copy ``r``'s current fields into its row (the fields of its view)."""
        i = r.row
        ints = self._int
        ints["arrival_seq"][i] = r.seq
        ints["num_input_tokens"][i] = r.fill_len
        ints["num_cached_tokens"][i] = r.cached_tokens()
        ints["max_new_tokens"][i] = r.output_len
        ints["num_output_tokens"][i] = r.num_output
        ints["arrival_processed_tokens"][i] = r.arrival_processed_tokens
        self._arrival_time[i] = r.queue_time
        feats = r.features
        self._has_features[i] = feats is not None
        if feats is not None:
            if self._features.shape[1] != len(feats):
                if self._features.shape[1]:
                    raise ValueError(f"feature length changed to {len(feats)} (was {self._features.shape[1]})")
                self._features = np.zeros((self._cap, len(feats)))
            self._features[i] = feats

    def columns(self, items: list[SimRequest], *, now: float, processed_tokens: int, num_running: int,
                admit_limit: int | None = None, prefill_budget_tokens: float = math.inf) -> QueueColumns:
        """The queue ``items`` (in their current order) as ``QueueColumns``."""
        rows = np.fromiter(map(_row_of, items), np.int64, len(items))
        has = np.flatnonzero(self._has_features[rows])
        features = self._features[rows[has]] if len(has) else np.zeros((0, 0))
        return QueueColumns(
            arrival_time=frozen(self._arrival_time[rows]),
            feature_rows=frozen(has.astype(np.int64)), features=frozen(features),
            now=now, processed_tokens=processed_tokens, num_running=num_running,
            admit_limit=admit_limit, prefill_budget_tokens=prefill_budget_tokens,
            **{name: frozen(col[rows]) for name, col in self._int.items()})
