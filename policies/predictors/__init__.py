"""Predictors: components that estimate something about a request for any policy.

``LengthPredictor`` estimates a request's output length from a feature vector
(LEAP: a hidden state the serving model computed at prefill) and learns online
from the true length when the request finishes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class LengthPredictor(Protocol):
    """Output-length prediction, learned online."""

    def predict(self, features: Sequence[float]) -> float:
        """Expected output tokens for a request with these features (>= 1)."""
        ...

    def predict_many(self, features: np.ndarray) -> np.ndarray:
        """``predict`` for each row of a (k x dim) matrix, vectorized."""
        ...

    def update(self, features: Sequence[float], output_tokens: int) -> None:
        """Learn from a finished request's true output length."""
        ...
