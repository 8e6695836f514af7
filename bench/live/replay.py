"""Replaying a (shaped) trace against a live OpenAI-compatible or SGLang server.

``replay_live`` is the live twin of the simulator's run: the same trace (after
``bench.traces.shape.shape_trace``), the same arrival rules
(``bench.live.sender``), and per-request ``RequestRecord``s with real streamed
TTFT and inter-token gaps (``bench.live.client``, SGLang's own ``bench_serving``
underneath), so ``bench.metrics`` and ``bench.report`` score and write both alike.

Sequence: warm-up requests (unrecorded; the first forward passes of a fresh
server are slow), a prefix-cache flush, then the replay with ``/v1/loads``
polled for the queue timeline. A request's arrival is when bench_serving
posted it (``client_lag_s`` in the meta says how late that was against the
schedule). Not visible from outside the server, so recorded as 0: retractions
and recomputed prefill tokens.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from bench.live.client import Client, Endpoint, failed_record, last_line, to_record
from bench.live.loads import LoadSampler, read_counters
from bench.live.sender import Sender, Sent
from bench.live.workload import PromptSynth
from bench.metrics import RequestRecord, Timeline
from bench.schema import LiveConfig
from bench.traces.trace import Trace, TraceRequest

log = logging.getLogger("switchboard.bench")

#: Warm-up request shape (prompt tokens, output tokens).
WARMUP_SHAPE = (32, 8)
#: Seconds between setting up the replay and its first scheduled send.
START_DELAY_S = 0.2


class LiveReplayError(RuntimeError):
    """The endpoint cannot serve the replay (warm-up failed)."""


@dataclass(frozen=True)
class LiveRun:
    """What a live replay produced."""

    records: list[RequestRecord]
    timeline: Timeline
    meta: dict[str, Any]


def replay_live(trace: Trace, live: LiveConfig, token_id_high: int,
                progress: bool = False) -> LiveRun:
    """Replay ``trace`` against ``live.endpoint`` (see module docs)."""
    return asyncio.run(_replay(trace, live, token_id_high, progress))


async def _replay(trace: Trace, live: LiveConfig, token_id_high: int, progress: bool) -> LiveRun:
    endpoint = Endpoint.of(live)
    check_vocabulary(endpoint, token_id_high)
    client = Client(endpoint)
    synth = PromptSynth(max(trace.block_size, 1), live.token_id_low, token_id_high, live.seed)
    await warm_up(client, synth, live.warmup_requests)
    flushed = flush_cache(endpoint.base_url) if live.flush_cache else None

    bar = _progress_bar(len(trace.requests), progress, trace.name)

    async def send(r: TraceRequest) -> Any:
        return await client.send(synth.prompt(r), r.output_tokens)

    sender = Sender(trace, send, timeout_s=live.request_timeout_s,
                    on_done=(lambda _: bar.update(1)) if bar is not None else None)
    sampler = LoadSampler(endpoint.base_url, live.loads_interval_s)
    before = read_counters(endpoint.base_url)
    stop = asyncio.Event()
    t0 = time.perf_counter() + START_DELAY_S
    sampling = asyncio.get_running_loop().create_task(sampler.run(t0, stop))
    wall = time.perf_counter()
    try:
        sent = await sender.run(t0)
    finally:
        stop.set()
        await sampling
        if bar is not None:
            bar.close()
    wall = time.perf_counter() - wall
    after = read_counters(endpoint.base_url) if before is not None else None

    records = sorted((_record(s, t0, endpoint.reports_cached_tokens) for s in sent),
                     key=lambda r: (r.arrival_s, r.rid))
    lag = np.array([s.sent_s - s.scheduled_s for s in sent]) if sent else np.zeros(1)
    meta = {
        "endpoint": endpoint.base_url, "api": endpoint.api.value, "model": endpoint.model,
        "cached_tokens_reported": endpoint.reports_cached_tokens,
        "warmup_requests": live.warmup_requests, "cache_flushed": flushed,
        "client_lag_s": {"mean": float(lag.mean()), "p99": float(np.percentile(lag, 99)),
                         "max": float(lag.max())},
        "loads_samples": len(sampler.timeline().t), "loads_error": sampler.error,
        "kv_used": "tokens held by requests (SGLang num_used_tokens; idle prefix cache excluded)",
        "replay_wall_s": wall,
        # NOTE: the server's own step counters over the replay (cumulative: after - before).
        "engine_counters": after.minus(before).to_dict() if after is not None and before is not None
        else None,
    }
    return LiveRun(records, sampler.timeline(), meta)


def _record(s: Sent, t0: float, cached_reported: bool) -> RequestRecord:
    if s.outcome is None:
        return failed_record(s.request, s.sent_s, s.done_s, s.error)
    return to_record(s.request, s.outcome, t0, s.done_s, cached_reported)


def check_vocabulary(endpoint: Endpoint, token_id_high: int) -> None:
    """Raise ``LiveReplayError`` when the server's tokenizer does not know the
    highest prompt token id (``/v1/detokenize`` turns it into no text).

    NOTE: SGLang does not check prompt token ids against the vocabulary: an id
    past it fails in the model's embedding and can take the scheduler down, so
    a ``model_profile`` that does not match the served model must fail here.
    """
    try:
        resp = httpx.post(endpoint.base_url + "/v1/detokenize", timeout=30, json={
            "model": endpoint.model, "tokens": [token_id_high - 1], "skip_special_tokens": False})
    except httpx.HTTPError as exc:
        raise LiveReplayError(f"cannot reach {endpoint.base_url}: {exc}") from exc
    if resp.status_code == 404:
        log.warning("bench: live: %s has no /v1/detokenize; prompt token ids up to %d are not "
                    "checked against its vocabulary", endpoint.base_url, token_id_high - 1)
        return
    text = resp.json().get("text") if resp.status_code == 200 else None
    if not text:
        raise LiveReplayError(
            f"token id {token_id_high - 1} is not in the vocabulary of the model at "
            f"{endpoint.base_url} (detokenize answered {resp.status_code}: {resp.text[:200]!r}); "
            "choose the served model's model_profile= or lower live.token_id_high")


async def warm_up(client: Client, synth: PromptSynth, n: int) -> None:
    """Send ``n`` short unrecorded requests one by one; raise ``LiveReplayError``
    with the server's answer if one fails (wrong URL, API or vocabulary)."""
    n_in, n_out = WARMUP_SHAPE
    for i in range(n):
        warm = TraceRequest(rid=f"warmup-{i}", arrival_s=0.0, input_tokens=n_in, output_tokens=n_out)
        out = await client.send(synth.prompt(warm), n_out)
        if not out.success:
            raise LiveReplayError(f"warm-up request to {client.endpoint.url} failed: "
                                  f"{last_line(out.error)}")


def flush_cache(base_url: str) -> bool | None:
    """Empty the server's prefix cache (SGLang ``POST /flush_cache``, through
    bench_serving); False with a warning where that fails."""
    from bench.live.client import bench_serving

    try:
        bench_serving().flush_server_cache(base_url, "sglang")
    except Exception as exc:  # NOTE: any server without the route; the replay still runs
        log.warning("bench: live: could not flush the prefix cache of %s (%s); cached "
                    "prefixes from earlier requests may remain", base_url, exc)
        return False
    return True


def _progress_bar(total: int, enabled: bool, desc: str) -> Any | None:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=f"{desc} (live)", unit="req", disable=None, mininterval=0.5)
