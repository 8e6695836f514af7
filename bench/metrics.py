"""Serving metrics as pure functions over per-request records.

Nothing here knows the simulator: a live replay that logs, per request, its
arrival, token times and cache hit fills the same ``RequestRecord`` and gets
the same numbers. Definitions:

* TTFT = first token - arrival; E2E = last token - arrival; per-token latency
  = E2E / output tokens (LEAP's "average per-token latency");
  TPOT = (last token - first token) / (output tokens - 1), requests with >= 2 tokens;
  ITL = gaps between consecutive tokens of a request (pooled over requests).
* goodput = finished requests with TTFT <= ``ttft_slo_s`` and TPOT <= ``tpot_slo_s``
  (one-token requests: TTFT only), per second of the measured span
  (first arrival to last finish).
* prefix hit rate = cached tokens at each request's first prefill / its prompt
  tokens, summed (token-weighted); recomputed tokens = prefill tokens beyond
  ``prompt - cached`` (work redone after retraction).
* Latency metrics cover finished requests; a time window holds the requests
  that *arrived* in it, and the timeline samples whose time falls in it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class RequestRecord:
    """What happened to one request."""

    rid: str
    arrival_s: float
    status: str
    """``finished``, ``rejected``, ``aborted`` or ``unserved``."""
    input_tokens: int
    output_tokens: int
    """Tokens generated."""
    cached_tokens: int | None = None
    """Prompt tokens served from the prefix cache at the first prefill (None: never prefilled)."""
    prefill_tokens: int = 0
    """Tokens prefilled in total (retraction recompute included)."""
    first_token_s: float | None = None
    finish_s: float | None = None
    token_times: np.ndarray | None = field(default=None, compare=False)
    """Time of every output token, when known."""
    retractions: int = 0
    session_id: str | None = None
    reason: str = ""

    @property
    def ttft(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def e2e(self) -> float | None:
        if self.status != "finished" or self.finish_s is None:
            return None
        return self.finish_s - self.arrival_s

    @property
    def tpot(self) -> float | None:
        if self.status != "finished" or self.output_tokens < 2 or self.first_token_s is None \
                or self.finish_s is None:
            return None
        return (self.finish_s - self.first_token_s) / (self.output_tokens - 1)

    @property
    def recomputed_tokens(self) -> int:
        if self.cached_tokens is None:
            return 0
        return max(0, self.prefill_tokens - (self.input_tokens - self.cached_tokens))


@dataclass(frozen=True)
class Slo:
    """Latency targets of goodput."""

    ttft_s: float
    tpot_s: float


@dataclass(frozen=True)
class Timeline:
    """Engine state sampled over time (all arrays the same length)."""

    t: np.ndarray
    waiting: np.ndarray
    running: np.ndarray
    kv_used: np.ndarray
    """Pool slots in use (cached + held by requests)."""
    kv_cached: np.ndarray
    """Slots holding prefix-cache blocks."""
    capacity: int


def stats(values: Sequence[float | None] | np.ndarray) -> dict[str, float | None]:
    """``mean`` and p50/p90/p99 of ``values`` (None when empty). NOTE: a ``None``
    value (e.g. the TTFT of a record without a first token) is NaN to numpy."""
    if len(values) == 0:
        return {"mean": None, **{f"p{p}": None for p in PERCENTILES}}
    arr = np.asarray(values, dtype=float)
    out: dict[str, float | None] = {"mean": float(arr.mean())}
    for p, v in zip(PERCENTILES, np.percentile(arr, PERCENTILES)):
        out[f"p{p}"] = float(v)
    return out


def meets_slo(r: RequestRecord, slo: Slo) -> bool:
    """Finished within both latency targets."""
    if r.status != "finished" or r.ttft is None or r.ttft > slo.ttft_s:
        return False
    tpot = r.tpot
    return tpot is None or tpot <= slo.tpot_s


def itl_values(records: Sequence[RequestRecord]) -> np.ndarray:
    """All inter-token gaps of finished requests with known token times."""
    gaps = [np.diff(r.token_times) for r in records
            if r.status == "finished" and r.token_times is not None and len(r.token_times) > 1]
    return np.concatenate(gaps) if gaps else np.empty(0)


def hit_rate(records: Sequence[RequestRecord]) -> float | None:
    """Token-weighted prefix hit rate over requests that were prefilled."""
    cached = sum(r.cached_tokens for r in records if r.cached_tokens is not None)
    total = sum(r.input_tokens for r in records if r.cached_tokens is not None)
    return cached / total if total else None


def span(records: Sequence[RequestRecord]) -> float:
    """Seconds from the first arrival to the last finish (0 without requests)."""
    if not records:
        return 0.0
    start = min(r.arrival_s for r in records)
    end = max((r.finish_s for r in records if r.finish_s is not None), default=start)
    return max(end - start, 0.0)


def summarize(records: Sequence[RequestRecord], slo: Slo,
              timeline: Timeline | None = None) -> dict[str, Any]:
    """Every metric of a run (see module docs)."""
    done = [r for r in records if r.status == "finished"]
    seconds = span(records)
    good = sum(1 for r in done if meets_slo(r, slo))
    out = {
        "requests": len(records),
        **{status: sum(1 for r in records if r.status == status)
           for status in ("finished", "rejected", "aborted", "unserved")},
        "span_s": seconds,
        "ttft_s": stats([r.ttft for r in done]),
        "tpot_s": stats([r.tpot for r in done if r.tpot is not None]),
        "itl_s": stats(itl_values(done)),
        "e2e_s": stats([r.e2e for r in done]),
        # NOTE: a finished record has its finish time, so its ``e2e`` is set (the cast only says so)
        "per_token_latency_s": stats([cast(float, r.e2e) / max(1, r.output_tokens) for r in done]),
        "goodput_rps": good / seconds if seconds > 0 else 0.0,
        "slo_attainment": good / len(records) if records else None,
        "throughput_output_tps": sum(r.output_tokens for r in done) / seconds if seconds > 0 else 0.0,
        "prefix_hit_rate": hit_rate(records),
        "recomputed_tokens": sum(r.recomputed_tokens for r in records),
        "prefill_tokens": sum(r.prefill_tokens for r in records),
        "retractions": sum(r.retractions for r in records),
        "slo": {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s},
    }
    if timeline is not None and len(timeline.t):
        out["queue_len"] = {"mean": float(timeline.waiting.mean()), "max": int(timeline.waiting.max())}
        use = timeline.kv_used / timeline.capacity
        out["kv_use"] = {"mean": float(use.mean()), "max": float(use.max())}
    return out


def windows(records: Sequence[RequestRecord], slo: Slo, window_s: float,
            timeline: Timeline | None = None) -> list[dict[str, Any]]:
    """Per time window of width ``window_s``: the same metrics, by arrival time."""
    if not records or window_s <= 0:
        return []
    start = min(r.arrival_s for r in records)
    end = max(max(r.arrival_s for r in records),
              max((r.finish_s for r in records if r.finish_s is not None), default=start))
    count = max(1, math.ceil((end - start) / window_s + 1e-12))
    buckets: list[list[RequestRecord]] = [[] for _ in range(count)]
    for r in records:
        buckets[min(int((r.arrival_s - start) / window_s), count - 1)].append(r)
    out = []
    for i, bucket in enumerate(buckets):
        lo, hi = start + i * window_s, start + (i + 1) * window_s
        done = [r for r in bucket if r.status == "finished"]
        row = {
            "start_s": lo, "end_s": hi, "arrivals": len(bucket), "finished": len(done),
            "ttft_s": stats([r.ttft for r in done]),
            "tpot_s": stats([r.tpot for r in done if r.tpot is not None]),
            "goodput_rps": sum(1 for r in done if meets_slo(r, slo)) / window_s,
            "prefix_hit_rate": hit_rate(bucket),
            "recomputed_tokens": sum(r.recomputed_tokens for r in bucket),
        }
        if timeline is not None:
            mask = (timeline.t >= lo) & (timeline.t < hi)
            if mask.any():
                row["queue_len_mean"] = float(timeline.waiting[mask].mean())
                row["kv_use_mean"] = float((timeline.kv_used[mask] / timeline.capacity).mean())
        out.append(row)
    return out
