"""A simulated output-length signal: the stand-in for LEAP's hidden-state features.

The simulator has no hidden states, so a LEAP run gives every request a
one-number feature vector ``(log(1 + true_output) + mean + std * z,)`` with
``z ~ N(0, 1)`` drawn per request id (seeded, independent of arrival order).
``mean`` and ``std`` are the log-error model of the live head measured by
``python -m bench.scripts.leap_curve`` (``log_error_mean``/``log_error_std`` in
``bench/results/leap_curve.json``); LEAP's own RLS head (``policy.feature_dim=1``)
then learns online, from zero, to map this signal to a length, as it does with
the real prompt embeddings in the server.

NOTE: this models the head's error as log-normal and independent of the
request; the rank quality it implies is reported next to the live Spearman.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class LengthSignal:
    """Per-request noisy log-length features (see module docs)."""

    log_std: float
    log_mean: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.log_std < 0:
            raise ValueError(f"sim.length_signal_log_std must be >= 0, got {self.log_std}")

    def features(self, rid: str, output_tokens: int) -> tuple[float, ...]:
        z = random.Random(f"{self.seed}:{rid}").gauss(0.0, 1.0)
        return (math.log1p(output_tokens) + self.log_mean + self.log_std * z,)
