"""The waiting queue as columns: ranking without one Python object per request.

A host with thousands of waiting requests cannot afford to build a
``RequestView`` per request per scheduling pass (~1 us each, every step). A
policy that can decide from numbers alone implements ``rank(QueueColumns)``
instead: every field of ``RequestView`` that such policies need, as one
read-only numpy array per field (row ``i`` = the ``i``-th waiting request in
the host's current order). The host keeps the arrays across passes and only
touches rows that arrived, left, or whose cache hit changed.

The same object still answers ``order(QueueView)`` (the simulator and the
view-based host path use it): ``ColumnarOrder.order`` converts the view to
columns and calls ``rank``, so there is one implementation of each rule.

Contract (policy's side), in addition to the module docs of
``policies.scheduling``:
  * ``rank`` returns a permutation of ``range(len(queue))`` as an integer
    array: positions, best first.
  * Only the *head* must follow the policy's full rules: the positions up to
    ``admit_limit``, or up to and including the first position at which the
    cumulative uncached work reaches ``prefill_budget_tokens``, whichever
    comes first. The host admits nothing beyond that head this pass, so a
    policy may order the rest by a cheaper rule (it must still return them).
    The head is a prefix of the full order: computing more of it never
    changes its first positions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from policies.scheduling import OrderDecision, QueueView

#: Integer columns of ``QueueColumns`` (name -> ``RequestView`` attribute).
INT_FIELDS = ("arrival_seq", "num_input_tokens", "num_cached_tokens", "max_new_tokens",
              "num_output_tokens", "arrival_processed_tokens")


def frozen(a: np.ndarray) -> np.ndarray:
    """``a``, made read-only (the columns' arrays are views for one pass)."""
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class QueueColumns:
    """The waiting queue at one scheduling pass, one read-only array per field.

    NOTE: arrays are read-only views of the host's state for this pass; a
    policy that wants to keep anything copies it. Row ``i`` of every array is
    the ``i``-th request of the host's current queue order.
    """

    arrival_seq: np.ndarray
    """``RequestView.arrival_seq`` (int64; unique, deterministic across ranks)."""
    arrival_time: np.ndarray
    """``RequestView.arrival_time`` (float64, host seconds)."""
    num_input_tokens: np.ndarray
    """``RequestView.num_input_tokens`` (int64)."""
    num_cached_tokens: np.ndarray
    """``RequestView.num_cached_tokens`` (int64): the host's latest match."""
    max_new_tokens: np.ndarray
    """``RequestView.max_new_tokens`` (int64)."""
    num_output_tokens: np.ndarray
    """``RequestView.num_output_tokens`` (int64)."""
    arrival_processed_tokens: np.ndarray
    """``RequestView.arrival_processed_tokens`` (int64)."""
    feature_rows: np.ndarray = field(default_factory=lambda: frozen(np.zeros(0, np.int64)))
    """Rows that carry hidden-state features (int64, ascending)."""
    features: np.ndarray = field(default_factory=lambda: frozen(np.zeros((0, 0))))
    """``features[j]`` belongs to row ``feature_rows[j]`` (float64, k x dim)."""
    now: float = 0.0
    """Host time of this pass, in seconds."""
    processed_tokens: int = 0
    """The host's prefill-token clock (see ``QueueView``)."""
    num_running: int = 0
    """Requests currently decoding."""
    admit_limit: int | None = None
    """At most this many requests can be admitted this pass (``None``: no bound)."""
    prefill_budget_tokens: float = math.inf
    """The host stops admitting once this many uncached tokens are taken."""

    def __len__(self) -> int:
        return len(self.arrival_seq)

    @property
    def work(self) -> np.ndarray:
        """Uncached prefill tokens per row, at least 1 (float64)."""
        work: np.ndarray = np.maximum(self.num_input_tokens - self.num_cached_tokens, 1).astype(float)
        return work

    @property
    def head_size(self) -> int:
        """Request-count bound of the head (see module docs)."""
        n = len(self)
        return n if self.admit_limit is None else max(0, min(n, self.admit_limit))

    @classmethod
    def from_view(cls, queue: QueueView) -> QueueColumns:
        """Columns of a ``QueueView`` (O(n) Python; the simulator's path)."""
        reqs = queue.requests
        n = len(reqs)
        cols = {name: frozen(np.fromiter((getattr(r, name) for r in reqs), np.int64, n))
                for name in INT_FIELDS}
        rows = [i for i, r in enumerate(reqs) if r.features is not None]
        features = (np.array([reqs[i].features for i in rows], dtype=float) if rows
                    else np.zeros((0, 0)))
        return cls(arrival_time=frozen(np.fromiter((r.arrival_time for r in reqs), float, n)),
                   feature_rows=frozen(np.array(rows, dtype=np.int64)), features=frozen(features),
                   now=queue.now, processed_tokens=queue.processed_tokens, num_running=queue.num_running,
                   admit_limit=queue.admit_limit, prefill_budget_tokens=queue.prefill_budget_tokens,
                   **cols)


@runtime_checkable
class RanksColumns(Protocol):
    """A scheduling policy that ranks the queue from columns (see module docs)."""

    def rank(self, queue: QueueColumns) -> np.ndarray:
        """Queue positions, best first: a permutation of ``range(len(queue))``."""
        ...


class ColumnarOrder:
    """Mixin: the view-based ``order`` of a policy that implements ``rank``."""

    def rank(self, queue: QueueColumns) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def order(self, queue: QueueView) -> OrderDecision:
        positions = self.rank(QueueColumns.from_view(queue))
        check_ranking(len(queue.requests), positions)
        reqs = queue.requests
        return OrderDecision(tuple(reqs[i].rid for i in positions.tolist()))


def check_ranking(n: int, positions: np.ndarray) -> None:
    """Raise ``ValueError`` unless ``positions`` is a permutation of ``range(n)``.

    NOTE: hosts call this on every ranking (vectorized: O(n) in numpy).
    """
    ok = positions.shape == (n,) and np.issubdtype(positions.dtype, np.integer)
    if ok and n:
        ok = bool(positions.min() >= 0 and positions.max() < n
                  and np.bincount(positions, minlength=n).max() == 1)
    if not ok:
        raise ValueError(f"scheduling ranking is not a permutation of the {n} queue positions "
                         f"(shape {positions.shape}, dtype {positions.dtype})")

