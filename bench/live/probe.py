"""Timing single forward passes of a live SGLang server from the outside.

Used to calibrate the simulator's cost model (``bench/scripts/calibrate_cpu.py``).
Every request goes through SGLang's own ``bench_serving`` client
(``/generate`` with ``input_ids``, ``ignore_eos``) and every prompt is fresh
(a request-private tail, ``bench.live.workload.PromptSynth``) unless a
measurement wants it cached:

* ``prefill(L)``: an isolated request with ``max_tokens=1``: client TTFT is one
  prefill iteration plus the fixed HTTP/tokenizer latency; ``/v1/loads``'
  ``total_prefill_busy_us`` gives the server's own prefill time;
* ``prefill_batch(k, L)``: ``k`` prompts sent while a blocker prefill runs, so
  that they wait and then run as one batch; server busy time of the pair minus
  that of a blocker alone (``/v1/loads`` is a snapshot SGLang publishes every
  few iterations, so it cannot confirm the batching itself: the blocker must
  outlast ``BLOCKER_LEAD_S`` plus the batch's arrival by a wide margin);
* ``decode(b, c)``: ``b`` streams over one cached ``c``-token prompt; the median
  gap between tokens while all ``b`` stream is one decode iteration.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import statistics
from dataclasses import dataclass

import httpx
import numpy as np

from bench.live.client import Client, Endpoint, RequestOutput, last_line
from bench.live.workload import PromptSynth
from bench.schema import LiveApi
from bench.traces.trace import TraceRequest

#: Seconds between sending a blocker prefill and the batch queued behind it.
BLOCKER_LEAD_S = 0.15


class ProbeError(RuntimeError):
    """A probe request failed."""


@dataclass(frozen=True)
class DecodeSample:
    """One ``decode(b, c)`` measurement."""

    step_s: float
    """Median gap between consecutive tokens while every stream was running."""
    gaps: int
    """Gaps the median is over."""
    context_per_request: int
    """Prompt plus tokens generated, per request, at the middle of the window."""


class Probe:
    """Measures one server's forward passes (see module docs)."""

    def __init__(self, base_url: str, token_id_high: int, token_id_low: int = 17,
                 seed: int | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.client = Client(Endpoint(self.base_url, LiveApi.generate, keep_special_tokens=True))
        # NOTE: a fresh seed per probe by default: a server that served an earlier
        # probe still caches its prompts, and a cached prompt is no prefill.
        self.seed = secrets.randbits(62) if seed is None else seed
        self.synth = PromptSynth(1, token_id_low, token_id_high, self.seed)
        self._ids = itertools.count()

    def fresh_prompt(self, n: int) -> list[int]:
        """``n`` token ids no earlier prompt of this probe starts with."""
        r = TraceRequest(rid=f"probe-{next(self._ids)}", arrival_s=0.0, input_tokens=n, output_tokens=1)
        return self.synth.prompt(r)

    async def send(self, prompt: list[int], max_tokens: int) -> RequestOutput:
        out = await self.client.send(prompt, max_tokens)
        if not out.success:
            raise ProbeError(f"request of {len(prompt)}+{max_tokens} tokens failed: "
                             f"{last_line(out.error)}")
        return out

    async def loads(self) -> dict[str, int] | None:
        """Rank-summed ``/v1/loads`` counters (as of SGLang's last published
        snapshot), or None where the server has none."""
        async with httpx.AsyncClient(timeout=10) as http:
            try:
                resp = await http.get(self.base_url + "/v1/loads", params={"include": "core"})
                resp.raise_for_status()
                loads = resp.json()["loads"]
            except (httpx.HTTPError, KeyError, ValueError):
                return None
        return {"total_prefill_busy_us": sum(int(x.get("total_prefill_busy_us", 0)) for x in loads)}

    async def prefill_busy_s(self) -> float | None:
        loads = await self.loads()
        return None if loads is None else loads["total_prefill_busy_us"] / 1e6

    async def prefill(self, n: int) -> tuple[float, float | None]:
        """``(client TTFT, server prefill busy time or None)`` of one fresh ``n``-token prompt."""
        before = await self.prefill_busy_s()
        out = await self.send(self.fresh_prompt(n), 1)
        after = await self.prefill_busy_s()
        busy = None if before is None or after is None else after - before
        return out.ttft, busy

    async def ttft(self, n: int, max_tokens: int) -> float:
        """Client TTFT of one fresh ``n``-token prompt generating ``max_tokens``."""
        return (await self.send(self.fresh_prompt(n), max_tokens)).ttft

    async def prefill_batch(self, k: int, n: int, blocker: int) -> float | None:
        """Server time of one prefill batch of ``k`` fresh ``n``-token prompts, or
        None when the server reports no busy time."""
        alone = await self.prefill(blocker)
        before = await self.prefill_busy_s()
        if alone[1] is None or before is None:
            return None
        blocking = asyncio.ensure_future(self.send(self.fresh_prompt(blocker), 1))
        await asyncio.sleep(BLOCKER_LEAD_S)
        # NOTE: SGLang's busy time of back-to-back prefills runs from the first
        # launch to the last result, so the pair's busy time is blocker + batch.
        await asyncio.gather(blocking, *(self.send(self.fresh_prompt(n), 1) for _ in range(k)))
        after = await self.prefill_busy_s()
        return None if after is None else (after - before) - alone[1]

    async def decode(self, b: int, c: int, max_tokens: int) -> DecodeSample:
        """One decode iteration's time with ``b`` requests over a cached ``c``-token prompt."""
        prompt = self.fresh_prompt(c)
        await self.send(prompt, 1)  # NOTE: primes the prefix cache; the b streams prefill 1 token
        outs = await asyncio.gather(*(self.send(prompt, max_tokens) for _ in range(b)))
        times = [o.start_time + o.ttft + np.concatenate(([0.0], np.cumsum(o.itl))) for o in outs]
        lo = max(t[0] for t in times)
        hi = min(t[-1] for t in times)
        gaps = []
        for t in times:
            # NOTE: the last token follows the one before it at once (SGLang's
            # overlap loop skips the finishing step), so it closes no gap.
            inner = t[:-1][(t[:-1] >= lo) & (t[:-1] <= hi)]
            gaps.extend(np.diff(inner).tolist())
        if not gaps:
            gaps = [g for o in outs for g in o.itl[1:-1]]
        mid = len(times[0]) // 2
        return DecodeSample(statistics.median(gaps), len(gaps), c + mid)
