"""``+speculative=tabletune``: the draft length with the most useful tokens per
second at each batch size, from measured step times and learned acceptance.

TableTune (design card "speculative tables"; write-up 2026-11-02): step time
``T(b, k)`` of a decode step of ``b`` requests drafting ``k`` tokens is
measured on the serving path itself (seeded from the deployment's offline
table, then an exponential average of every step the host times); the chance
``p_i`` that draft position ``i`` is accepted given that ``1..i-1`` were is
learned from the verify outcomes. Expected tokens per request and step at
length ``k`` are ``E(k) = 1 + sum_{j<=k} prod_{i<=j} p_i`` (the verify's bonus
token plus the accepted prefix), so the goodput of ``k`` at batch size ``b``
is ``b * E(k) / T(b, k)``; the table row of ``b``'s bucket is the ``k`` with
the largest goodput.

- **Guard**: ``k = 0`` is a candidate like any other (``E(0) = 1``): when
  drafting does not pay, the table says 0.
- **Margin and dwell**: a bucket leaves its current length only for one
  ``margin`` better, and not within ``dwell_steps`` of its last change
  (noise in measured times must not make it thrash).
- **Probes**: every ``probe_every`` steps of a bucket, one step runs the
  least recently measured neighbour of the current length (``k-1`` or
  ``k+1``), so estimates of unused lengths follow the hardware and the
  traffic; a cell never measured is probed first.

NOTE: pure and deterministic: everything it knows arrives in views and
outcomes (no clocks; step times are the host's measurements). Acceptance is
learned over all batch sizes (it depends on the text, not the load:
vLLM#26504 measured it flat from b=1 to b=32); step times per bucket.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from policies.speculative import DraftDecision, SpecOutcome, SpecStepView, SpeculativeNeeds, StepTimeTable

DEFAULT_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass
class _Bucket:
    """One row of the table: its current length and what it measured."""

    current: int | None = None
    steps: int = 0
    changed_at: int = 0
    times: dict[int, float] = field(default_factory=dict)
    """EMA of step time per draft length, seconds."""
    measured_at: dict[int, int] = field(default_factory=dict)
    """The bucket's step count when each length was last timed."""
    next_probe_up: bool = True


class TableTunePolicy:
    """Draft length per batch-size bucket by measured goodput (see module docs)."""

    def __init__(self, batch_buckets: Sequence[int] = DEFAULT_BUCKETS, time_ema: float = 0.2,
                 acceptance_decay: float = 0.995, prior_accept: float = 0.5, prior_weight: float = 2.0,
                 margin: float = 0.03, dwell_steps: int = 8, probe_every: int = 64) -> None:
        buckets = tuple(int(b) for b in batch_buckets)
        if not buckets or buckets[0] != 1 or any(a >= b for a, b in zip(buckets, buckets[1:], strict=False)):
            raise ValueError(f"batch_buckets must ascend from 1, got {list(batch_buckets)}")
        if not 0 < time_ema <= 1:
            raise ValueError(f"time_ema must be in (0, 1], got {time_ema}")
        if not 0 < acceptance_decay <= 1:
            raise ValueError(f"acceptance_decay must be in (0, 1], got {acceptance_decay}")
        if not 0 <= prior_accept < 1 or prior_weight <= 0:
            raise ValueError("prior_accept must be in [0, 1) and prior_weight > 0")
        if margin < 0 or dwell_steps < 0 or probe_every < 2:
            raise ValueError("margin and dwell_steps must be >= 0, probe_every >= 2")
        self.batch_buckets = buckets
        """Lower edges of the batch-size buckets; a batch size uses the largest edge <= it."""
        self.time_ema = time_ema
        """Weight of a new step-time measurement in its cell's average."""
        self.acceptance_decay = acceptance_decay
        """Per observed step, older acceptance evidence is multiplied by this."""
        self.prior_accept = prior_accept
        """Per-position acceptance assumed before evidence (a Beta prior's mean)."""
        self.prior_weight = prior_weight
        """Weight of that prior, in verified positions."""
        self.margin = margin
        """Relative goodput gain needed to leave a bucket's current length."""
        self.dwell_steps = dwell_steps
        """Steps of a bucket after a change before it may change again."""
        self.probe_every = probe_every
        """A bucket probes a neighbouring length once every this many of its steps."""
        self.needs = SpeculativeNeeds(step_timing=True)
        """Any candidate; every step timed."""
        self._buckets = [_Bucket() for _ in buckets]
        self._tried: list[float] = []
        self._kept: list[float] = []
        self._seed: dict[tuple[int, int], float] = {}

    # -- the faces ---------------------------------------------------------

    def seed_step_times(self, table: StepTimeTable) -> None:
        """Start every bucket from the offline table (the nearest measured batch size)."""
        self._seed = table.lookup()
        for i, lo in enumerate(self.batch_buckets):
            for (b, k), t in self._seed.items():
                if self._bucket_of(b) == i and (k not in self._buckets[i].times or b == lo):
                    self._buckets[i].times[k] = t

    def draft_length(self, view: SpecStepView) -> DraftDecision:
        if len(view.candidates) == 1:
            return DraftDecision(view.candidates[0], "only candidate")
        row = self._buckets[self._bucket_of(view.decode_batch_size)]
        row.steps += 1
        unmeasured = [k for k in view.candidates if k not in row.times]
        if unmeasured:
            return DraftDecision(unmeasured[0], "probe (unmeasured)")
        best = max(view.candidates, key=lambda k: (self._goodput(row, k), -k))
        current = row.current if row.current in view.candidates else None
        if current is None:
            row.current, row.changed_at = best, row.steps
        elif (best != current and row.steps - row.changed_at >= self.dwell_steps
              and self._goodput(row, best) > (1 + self.margin) * self._goodput(row, current)):
            row.current, row.changed_at = best, row.steps
        chosen = row.current if row.current is not None else best
        if row.steps % self.probe_every == 0:
            probe = self._probe_of(row, chosen, view.candidates)
            if probe is not None:
                return DraftDecision(probe, "probe")
        return DraftDecision(chosen, "guard" if chosen == 0 else "goodput")

    def observe_step(self, outcome: SpecOutcome) -> None:
        row = self._buckets[self._bucket_of(outcome.decode_batch_size)]
        k = outcome.draft_tokens
        if outcome.step_time_s > 0:
            old = row.times.get(k)
            t = outcome.step_time_s
            row.times[k] = t if old is None else old + self.time_ema * (t - old)
            row.measured_at[k] = row.steps
        if k == 0 or not outcome.accepted:
            return
        self._grow(k)
        decay = self.acceptance_decay
        self._tried = [x * decay for x in self._tried]
        self._kept = [x * decay for x in self._kept]
        for accepted in outcome.accepted:
            # Positions 1..accepted were accepted; position accepted+1 (if drafted) was not.
            for i in range(min(accepted + 1, k)):
                self._tried[i] += 1
            for i in range(accepted):
                self._kept[i] += 1

    # -- estimates ---------------------------------------------------------

    def acceptance(self) -> tuple[float, ...]:
        """Learned ``p_i`` (position ``i+1`` accepted given the ones before were)."""
        w, p0 = self.prior_weight, self.prior_accept
        return tuple((kept + w * p0) / (tried + w) for tried, kept in zip(self._tried, self._kept, strict=True))

    def expected_tokens(self, k: int) -> float:
        """``E(k)``: tokens a request gains per step drafting ``k`` (bonus included).

        NOTE: a position never verified yet takes the last learned rate (or the
        prior), so longer lengths are never assumed better than the evidence."""
        rates = self.acceptance()
        total, run = 1.0, 1.0
        for i in range(k):
            p = rates[i] if i < len(rates) else (rates[-1] if rates else self.prior_accept)
            run *= p
            total += run
        return total

    def table(self) -> dict[int, int | None]:
        """The current row of each bucket: ``{lower batch-size edge: length}``."""
        return {lo: row.current for lo, row in zip(self.batch_buckets, self._buckets, strict=True)}

    def _goodput(self, row: _Bucket, k: int) -> float:
        return self.expected_tokens(k) / row.times[k]

    def _probe_of(self, row: _Bucket, chosen: int, candidates: tuple[int, ...]) -> int | None:
        """The neighbour of ``chosen`` measured least recently (alternating on ties)."""
        near = [k for k in (chosen - 1, chosen + 1) if k in candidates]
        if not near:
            return None
        near.sort(key=lambda k: (row.measured_at.get(k, -1), (k < chosen) == row.next_probe_up))
        row.next_probe_up = not row.next_probe_up
        return near[0]

    def _bucket_of(self, batch_size: int) -> int:
        i = 0
        for j, lo in enumerate(self.batch_buckets):
            if batch_size >= lo:
                i = j
        return i

    def _grow(self, k: int) -> None:
        while len(self._tried) < k:
            self._tried.append(0.0)
            self._kept.append(0.0)
