"""Predict the largest context a session will reach, learned online.

A pure component (Basin uses it; any policy may). It learns from finished
sessions: their first context, their maximum context and their number of turns,
over a window of the most recent ``history`` sessions. For a live session with
first context ``c0``, current context ``c`` after ``t`` turns, the prediction is
the larger of two quantile estimates (``quantile`` of the finished sessions):

* ratio: ``c0 * Q(max / first)`` — sessions grow by similar factors;
* growth: ``c + g * Q(turns left | at least t turns)`` with ``g`` the session's
  own growth per turn so far (the median finished growth for a first turn);

never below ``c``. With fewer than ``min_history`` finished sessions it
predicts ``c * prior_growth``.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SessionSample:
    """One finished session."""

    first_context: int
    max_context: int
    turns: int


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of non-empty ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class SessionLifetimePredictor:
    """Online predictor of a session's maximum context (see module docs)."""

    def __init__(self, quantile: float = 0.8, history: int = 512, min_history: int = 8,
                 prior_growth: float = 4.0) -> None:
        if not 0 < quantile <= 1 or history < 1 or min_history < 1 or prior_growth < 1:
            raise ValueError("need 0 < quantile <= 1, history >= 1, min_history >= 1, prior_growth >= 1")
        self.q = quantile
        self.min_history = min_history
        self.prior_growth = prior_growth
        self.samples: deque[SessionSample] = deque(maxlen=history)
        # NOTE: quantiles over the window are cached until the next ``learn``
        self._ratio: float | None = None
        self._first_growth: float | None = None
        self._turns_left: dict[int, float] = {}

    def learn(self, sample: SessionSample) -> None:
        self.samples.append(sample)
        self._ratio = self._first_growth = None
        self._turns_left.clear()

    def predict(self, first_context: int, context: int, turns: int) -> int:
        """Predicted maximum context of a live session."""
        if len(self.samples) < self.min_history:
            return math.ceil(context * self.prior_growth)
        if self._ratio is None:
            self._ratio = quantile([s.max_context / max(1, s.first_context) for s in self.samples], self.q)
            self._first_growth = quantile([(s.max_context - s.first_context) / max(1, s.turns - 1)
                                           for s in self.samples], 0.5)
        by_ratio = first_context * self._ratio
        left = self._turns_left.get(turns)
        if left is None:
            longer = [float(s.turns - turns) for s in self.samples if s.turns >= turns] or [0.0]
            left = self._turns_left[turns] = quantile(longer, self.q)
        if turns > 1:
            growth = (context - first_context) / (turns - 1)
        else:
            growth = self._first_growth  # type: ignore[assignment]
        by_growth = context + growth * left
        return math.ceil(max(context, by_ratio, by_growth))
