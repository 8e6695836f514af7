"""Estimators of a diffusion-LM request's denoising rounds (DWISE).

* ``ArrivalRoundsRegression``: at arrival, from the prompt alone: a linear
  regression of ``log(1 + rounds)`` on ``log(1 + words)``, ``log(1 + lines)``
  and ``log(1 + tokens)`` of the prompt, trained online by recursive least
  squares from every finished request (or started from a saved head).
* ``RoundsRefiner``: once, after the request's first denoising round, from
  the mean of the final-layer hidden states over that round's block: a
  two-layer network (``tanh`` hidden layer) predicting ``log(1 + rounds)``.
  Its weights are fitted offline (``fit_refiner``, by
  ``bench/scripts/dwise_fit.py`` from served requests) and loaded from a small
  ``.npz``.

Both predict the request's *total* denoising rounds; the policy subtracts the
rounds already run. Pure numpy, deterministic (same inputs, same outputs on
every tensor-parallel rank).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from policies.predictors.rls import RlsLengthHead


def prompt_features(words: int, lines: int, tokens: int) -> tuple[float, float, float]:
    """The arrival regression's inputs, log-scaled."""
    return math.log1p(words), math.log1p(lines), math.log1p(tokens)


class ArrivalRoundsRegression:
    """Total denoising rounds from the prompt's word, line and token counts."""

    def __init__(self, prior_rounds: float = 32.0, forgetting: float = 0.999, ridge: float = 1.0,
                 head_path: str | None = None) -> None:
        self.head = (RlsLengthHead.load(Path(head_path)) if head_path else
                     RlsLengthHead(3, forgetting=forgetting, ridge=ridge, prior_tokens=prior_rounds))
        if self.head.dim != 3:
            raise ValueError(f"{head_path}: an arrival head has 3 inputs, this one {self.head.dim}")

    def predict(self, words: int, lines: int, tokens: int) -> float:
        """Expected total denoising rounds (>= 1)."""
        return self.head.predict(prompt_features(words, lines, tokens))

    def update(self, words: int, lines: int, tokens: int, rounds: int) -> None:
        """Learn from a finished request's true denoising rounds."""
        self.head.update(prompt_features(words, lines, tokens), rounds)

    def save(self, path: Path) -> None:
        self.head.save(path)


class RoundsRefiner:
    """``log(1 + rounds) = w2 . tanh(W1 z + b1) + b2`` with ``z`` the standardized
    mean final hidden state (see module docs)."""

    def __init__(self, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray, b2: float,
                 mean: np.ndarray, std: np.ndarray) -> None:
        hidden, dim = w1.shape
        if b1.shape != (hidden,) or w2.shape != (hidden,) or mean.shape != (dim,) or std.shape != (dim,):
            raise ValueError("inconsistent refiner shapes")
        self.w1, self.b1, self.w2, self.b2 = w1, b1, w2, float(b2)
        self.mean, self.std = mean, np.where(std > 1e-8, std, 1.0)

    @property
    def dim(self) -> int:
        return int(self.w1.shape[1])

    def predict(self, features: Sequence[float]) -> float:
        """Expected total denoising rounds (>= 1)."""
        x = np.asarray(features, dtype=float)
        if x.shape != (self.dim,):
            raise ValueError(f"expected {self.dim} features, got shape {x.shape}")
        h = np.tanh(self.w1 @ ((x - self.mean) / self.std) + self.b1)
        return max(1.0, math.expm1(float(self.w2 @ h + self.b2)))

    def save(self, path: Path) -> None:
        np.savez(path, w1=self.w1, b1=self.b1, w2=self.w2, b2=self.b2, mean=self.mean, std=self.std)

    @classmethod
    def load(cls, path: Path) -> RoundsRefiner:
        d = np.load(path)
        return cls(d["w1"], d["b1"], d["w2"], float(d["b2"]), d["mean"], d["std"])


def fit_refiner(features: np.ndarray, rounds: np.ndarray, hidden: int = 16, steps: int = 3000,
                lr: float = 0.01, weight_decay: float = 1e-3, seed: int = 0) -> RoundsRefiner:
    """Fit a ``RoundsRefiner`` to (mean hidden state, true total rounds) pairs by
    full-batch Adam on the squared error of ``log(1 + rounds)``.

    NOTE: deterministic for a given seed (numpy only, fixed iteration order)."""
    x = np.asarray(features, dtype=float)
    y = np.log1p(np.asarray(rounds, dtype=float))
    if x.ndim != 2 or len(x) != len(y) or len(y) < 2:
        raise ValueError("need a (n, dim) feature matrix and n >= 2 round counts")
    mean, std = x.mean(0), x.std(0)
    z = (x - mean) / np.where(std > 1e-8, std, 1.0)
    rng = np.random.default_rng(seed)
    params = [rng.normal(0, 1 / math.sqrt(x.shape[1]), (hidden, x.shape[1])), np.zeros(hidden),
              rng.normal(0, 1 / math.sqrt(hidden), hidden), np.array(y.mean())]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    for t in range(1, steps + 1):
        w1, b1, w2, b2 = params
        h = np.tanh(z @ w1.T + b1)
        err = h @ w2 + b2 - y
        g_out = 2 * err / len(y)
        g_h = np.outer(g_out, w2) * (1 - h * h)
        grads = [g_h.T @ z + weight_decay * w1, g_h.sum(0), h.T @ g_out + weight_decay * w2,
                 np.array(g_out.sum())]
        for i, g in enumerate(grads):
            m[i] = 0.9 * m[i] + 0.1 * g
            v[i] = 0.999 * v[i] + 0.001 * g * g
            params[i] = params[i] - lr * (m[i] / (1 - 0.9 ** t)) / (np.sqrt(v[i] / (1 - 0.999 ** t)) + 1e-8)
    return RoundsRefiner(params[0], params[1], params[2], float(params[3]), mean, std)
