"""The live server's queue and KV use over time, from SGLang's ``/v1/loads``.

The simulator samples its own state; a live replay polls the server. Fields
(summed over data-parallel ranks): ``num_waiting_reqs``, ``num_running_reqs``
and ``num_used_tokens``: KV slots held by requests. SGLang counts evictable
prefix-cache slots as free, so ``kv_used`` here excludes the idle cache
(the simulator's includes it) and ``kv_cached`` is unknown (NaN).

``/v1/loads`` answers from the snapshot the scheduler last published (every
5th iteration, or at once when a value changed while idle), so a sample can
lag the server by a few iterations.
"""

from __future__ import annotations

import asyncio
import logging
import time
from array import array
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np

from bench.counters import EngineCounters
from bench.metrics import Timeline

log = logging.getLogger("switchboard.bench")


class LoadSampler:
    """Polls ``{base_url}/v1/loads`` every ``interval_s`` until stopped."""

    def __init__(self, base_url: str, interval_s: float,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.url = base_url.rstrip("/") + "/v1/loads"
        self.interval_s = interval_s
        self.clock = clock
        self.capacity = 0
        self._rows = array("d")
        self.error: str | None = None
        """Why sampling stopped early (no ``/v1/loads``, connection lost)."""

    async def run(self, t0: float, stop: asyncio.Event) -> None:
        """Sample (times relative to ``t0`` on ``clock``) until ``stop`` is set."""
        if self.interval_s <= 0:
            return
        # NOTE: the timeline starts with the replay, never before its origin.
        await asyncio.sleep(max(0.0, t0 - self.clock()))
        async with httpx.AsyncClient(timeout=10) as http:
            while not stop.is_set():
                t = self.clock() - t0
                try:
                    resp = await http.get(self.url, params={"include": "core"})
                    resp.raise_for_status()
                    self._add(t, resp.json()["loads"])
                except (httpx.HTTPError, KeyError, ValueError) as exc:
                    # NOTE: a server without /v1/loads (not SGLang) is not an error
                    # of the replay; the run just has no timeline.
                    self.error = f"{type(exc).__name__}: {exc}"
                    log.warning("bench: live: stopped sampling %s (%s)", self.url, self.error)
                    return
                try:
                    await asyncio.wait_for(stop.wait(), self.interval_s)
                except TimeoutError:
                    pass

    def _add(self, t: float, loads: list[dict[str, Any]]) -> None:
        self.capacity = sum(int(x.get("max_total_num_tokens", 0)) for x in loads)
        self._rows.extend((t, sum(x["num_waiting_reqs"] for x in loads),
                           sum(x["num_running_reqs"] for x in loads),
                           sum(x["num_used_tokens"] for x in loads)))

    def timeline(self) -> Timeline:
        """The samples so far (empty arrays when none)."""
        rows = np.frombuffer(self._rows, dtype=np.float64).reshape(-1, 4)
        return Timeline(t=rows[:, 0].copy(), waiting=rows[:, 1].astype(int),
                        running=rows[:, 2].astype(int), kv_used=rows[:, 3].astype(np.int64),
                        kv_cached=np.full(len(rows), np.nan), capacity=max(self.capacity, 1))


def read_counters(base_url: str) -> EngineCounters | None:
    """SGLang's cumulative step counters now (``bench.counters``); ``None`` when
    the server does not publish them (not SGLang, or no ``/v1/loads``)."""
    try:
        resp = httpx.get(base_url.rstrip("/") + "/v1/loads", timeout=10)
        resp.raise_for_status()
        loads = resp.json()["loads"]
    except (httpx.HTTPError, KeyError, ValueError):
        return None
    if not loads or "total_prefill_busy_us" not in loads[0]:
        return None
    return EngineCounters.from_loads(loads)
