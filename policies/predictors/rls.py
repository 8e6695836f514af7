"""A linear output-length head trained online by recursive least squares.

Predicts ``log(1 + output_tokens)`` as ``w . [x, 1]`` (a bias term appended),
so errors are relative and long outputs do not dominate. Each finished request
updates ``w`` and the inverse-covariance estimate ``P`` in closed form::

    k = P z / (lam + z' P z);   w += k (y - w . z);   P = (P - k z' P) / lam

with forgetting factor ``lam`` (older requests weigh ``lam^age``): no
gradients, no learning rate, no replay buffer. ``P`` starts at ``I / ridge``
(a ridge prior towards ``w = 0``); before any update the head predicts the
prior ``prior_tokens``. A head can be saved and loaded (``.npz``).

NOTE: features are standardized with running means and variances (Welford)
before the update; the same transform is applied at prediction time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np


class RlsLengthHead:
    """Online RLS regression of log output length (see module docs)."""

    def __init__(self, dim: int, forgetting: float = 0.999, ridge: float = 1.0,
                 prior_tokens: float = 64.0) -> None:
        if dim < 1 or not 0 < forgetting <= 1 or ridge <= 0 or prior_tokens < 1:
            raise ValueError("need dim >= 1, 0 < forgetting <= 1, ridge > 0, prior_tokens >= 1")
        self.dim = dim
        self.lam = forgetting
        self.w = np.zeros(dim + 1)
        self.w[-1] = math.log1p(prior_tokens)
        self.P = np.eye(dim + 1) / ridge
        self.n = 0
        self._mean = np.zeros(dim)
        self._m2 = np.zeros(dim)

    def _z(self, features: Sequence[float] | np.ndarray) -> np.ndarray:
        x = np.asarray(features, dtype=float)
        if x.shape != (self.dim,):
            raise ValueError(f"expected {self.dim} features, got shape {x.shape}")
        std = np.sqrt(self._m2 / max(1, self.n - 1)) if self.n > 1 else np.ones(self.dim)
        return np.append((x - self._mean) / np.where(std > 1e-8, std, 1.0), 1.0)

    def predict(self, features: Sequence[float]) -> float:
        return max(1.0, math.expm1(float(self.w @ self._z(features))))

    def predict_many(self, features: np.ndarray) -> np.ndarray:
        x = np.asarray(features, dtype=float)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"expected a (k, {self.dim}) feature matrix, got shape {x.shape}")
        std = np.sqrt(self._m2 / max(1, self.n - 1)) if self.n > 1 else np.ones(self.dim)
        z = (x - self._mean) / np.where(std > 1e-8, std, 1.0)
        predicted: np.ndarray = np.maximum(1.0, np.expm1(z @ self.w[:-1] + self.w[-1]))
        return predicted

    def update(self, features: Sequence[float], output_tokens: int) -> None:
        x = np.asarray(features, dtype=float)
        self.n += 1
        delta = x - self._mean
        self._mean += delta / self.n
        self._m2 += delta * (x - self._mean)
        z = self._z(x)
        pz = self.P @ z
        k = pz / (self.lam + z @ pz)
        self.w += k * (math.log1p(output_tokens) - self.w @ z)
        self.P = (self.P - np.outer(k, pz)) / self.lam

    def save(self, path: Path) -> None:
        np.savez(path, w=self.w, P=self.P, n=self.n, mean=self._mean, m2=self._m2, lam=self.lam)

    @classmethod
    def load(cls, path: Path) -> RlsLengthHead:
        data = np.load(path)
        head = cls(dim=len(data["mean"]), forgetting=float(data["lam"]))
        head.w, head.P, head.n = data["w"], data["P"], int(data["n"])
        head._mean, head._m2 = data["mean"], data["m2"]
        return head
