"""SGLang's own step counters, read live and rebuilt from a simulation alike.

SGLang 0.5.23's scheduler keeps two cumulative measures of where its time goes
and publishes them in ``/v1/loads``:

* ``total_prefill_busy_us`` / ``total_prefill_uncached_tokens``: for every
  prefill batch, the time from its launch (or the previous prefill's result,
  whichever is later) to when its result is processed;
* ``decode_moments`` = ``[n, sum b, sum t_us, sum b^2, sum b*t_us, sum tokens]``
  over consecutive decode batches (no idle gap, no prefill between): ``b`` the
  batch's requests, ``t`` the time from the previous decode launch to this one.

A live replay records the counters' change over the replay
(``meta.engine_counters``); a simulation on a device with a synchronous forward
pass rebuilds the same sums from its iteration log
(``bench.sim.overlap.IterationLog.engine_counters``), with SGLang's accounting
(under the overlap loop on CPU a result is processed after the next iteration
ran; without it, when its own iteration ends). Comparing the two
says whether a latency error comes from prefill or from decode steps, and how a
decode step's cost grows with the batch (the least-squares line through the
moments).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class EngineCounters:
    """Cumulative prefill and decode-step counters (seconds, not µs)."""

    prefill_busy_s: float = 0.0
    prefill_tokens: int = 0
    """Uncached prompt tokens prefilled."""
    decode_steps: int = 0
    decode_batch_sum: float = 0.0
    decode_time_s: float = 0.0
    decode_batch_sq_sum: float = 0.0
    decode_batch_time_sum: float = 0.0
    """Sum of batch size times step time (s)."""

    @classmethod
    def from_loads(cls, loads: list[dict[str, Any]]) -> EngineCounters:
        """The counters of a ``/v1/loads`` answer's ``loads`` (summed over ranks)."""
        total = cls()
        for rank in loads:
            m = rank.get("decode_moments") or [0.0] * 6
            total = total.plus(cls(
                prefill_busy_s=rank.get("total_prefill_busy_us", 0) / 1e6,
                prefill_tokens=int(rank.get("total_prefill_uncached_tokens", 0)),
                decode_steps=int(m[0]), decode_batch_sum=m[1], decode_time_s=m[2] / 1e6,
                decode_batch_sq_sum=m[3], decode_batch_time_sum=m[4] / 1e6))
        return total

    def plus(self, other: EngineCounters) -> EngineCounters:
        return EngineCounters(**{k: v + getattr(other, k) for k, v in asdict(self).items()})

    def minus(self, before: EngineCounters) -> EngineCounters:
        """The change since ``before`` (counters read at the start of a replay)."""
        return EngineCounters(**{k: v - getattr(before, k) for k, v in asdict(self).items()})

    def to_dict(self) -> dict[str, float]:
        return asdict(self) | self.decode_line()

    def decode_line(self) -> dict[str, float]:
        """Mean batch, mean step (s), and the least-squares step time per
        request (``slope_s``) and at zero requests (``intercept_s``); NaN when
        there are too few steps or one batch size only."""
        n = self.decode_steps
        nan = float("nan")
        if n < 2:
            return {"mean_batch": nan, "mean_step_s": nan, "slope_s": nan, "intercept_s": nan}
        mb, mt = self.decode_batch_sum / n, self.decode_time_s / n
        var = self.decode_batch_sq_sum / n - mb * mb
        slope = (self.decode_batch_time_sum / n - mb * mt) / var if var > 1e-12 else nan
        return {"mean_batch": mb, "mean_step_s": mt, "slope_s": slope, "intercept_s": mt - slope * mb}
