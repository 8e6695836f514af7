"""Fault and soak runs against a live server: aborted streams, overload, killed schedulers.

Each run takes a started unit (``bench.live.server.ServerProcess``) and returns
plain counts for ``bench.scripts.reliability``. The client is one asyncio loop
(httpx); every request is a chat completion with a unique prompt (no prefix
cache hits between requests) and ``ignore_eos``, so its length is the one asked.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from typing import Any

import httpx
import psutil

from bench.live.chat import loads, wait_for
from bench.live.loads import LoadSampler
from bench.live.server import ServerProcess

#: Statuses an overloaded server may refuse with; each must carry Retry-After.
REFUSALS = (429, 503)
_WORDS = ("river stone lamp garden window music paper orange silver winter candle forest harbor "
          "violet thunder meadow copper lantern pebble canyon").split()


def prompt(rng: random.Random, n_words: int = 12) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n_words)) + f" #{rng.getrandbits(48):x}"


def body(rng: random.Random, max_tokens: int, stream: bool) -> dict[str, Any]:
    return {"model": "default", "messages": [{"role": "user", "content": prompt(rng)}], "max_tokens": max_tokens,
            "temperature": 0, "ignore_eos": True, "stream": stream}


def tree(pid: int) -> list[psutil.Process]:
    """The process and its descendants (those still alive)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def rss_mib(pid: int) -> float:
    """Resident memory of ``pid``'s whole tree, MiB."""
    total = 0
    for p in tree(pid):
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total / 2 ** 20


def schedulers(pid: int) -> list[psutil.Process]:
    """SGLang scheduler processes under ``pid`` (SGLang titles them ``sglang::scheduler``)."""
    out = []
    for p in tree(pid):
        try:
            if "sglang::scheduler" in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            pass
    return out


def drain_s(base_url: str, timeout_s: float = 180) -> float | None:
    """Seconds until the server holds no request and no KV (``None``: not within ``timeout_s``)."""
    t0 = time.monotonic()
    try:
        wait_for(lambda: kv_idle(base_url), timeout=timeout_s, what="KV freed")
    except AssertionError:
        return None
    return time.monotonic() - t0


def kv_idle(base_url: str) -> bool:
    load = loads(base_url)
    return bool(load["num_running_reqs"] == 0 and load["num_waiting_reqs"] == 0 and load["num_used_tokens"] == 0)


async def _hang_up(client: httpx.AsyncClient, rng: random.Random, tally: Counter[str]) -> None:
    """One stream, abandoned at a random point: before its headers, or after k chunks."""
    max_tokens = rng.randint(8, 64)
    before_headers = rng.random() < 0.2
    after_chunks = rng.randrange(0, max_tokens)

    async def go() -> None:
        async with client.stream("POST", "/v1/chat/completions", json=body(rng, max_tokens, True)) as r:
            if r.status_code != 200:
                tally[f"status {r.status_code}"] += 1
                return
            seen = 0
            async for line in r.aiter_lines():
                if line.startswith("data:") and line != "data: [DONE]":
                    seen += 1
                    if seen > after_chunks:
                        tally["hung up mid-stream"] += 1
                        return
            tally["finished before the hang-up point"] += 1

    try:
        if before_headers:
            try:
                await asyncio.wait_for(go(), timeout=rng.uniform(0.0, 0.5))
            except TimeoutError:
                tally["hung up before the first byte"] += 1
            return
        await go()
    except httpx.HTTPError as exc:  # NOTE: counted, not raised: one failed stream must not end the section
        tally[f"transport error ({type(exc).__name__})"] += 1


def abort_streams(unit: ServerProcess, n: int, concurrency: int, seed: int) -> dict[str, Any]:
    """``n`` streams abandoned at random points, ``concurrency`` at a time; then KV held and RSS."""
    assert unit.proc is not None
    rng = random.Random(seed)
    tally: Counter[str] = Counter()
    rss_before = rss_mib(unit.proc.pid)

    async def crowd() -> None:
        gate = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(base_url=unit.base_url, timeout=300) as client:
            async def one() -> None:
                async with gate:
                    await _hang_up(client, rng, tally)
            await asyncio.gather(*(one() for _ in range(n)))

    t0 = time.monotonic()
    asyncio.run(crowd())
    wall = time.monotonic() - t0
    drained = drain_s(unit.base_url)
    load = loads(unit.base_url)
    return {"streams": n, "concurrency": concurrency, "outcomes": dict(tally), "wall_s": wall,
            "kv_tokens_after": int(load["num_used_tokens"]), "running_after": int(load["num_running_reqs"]),
            "waiting_after": int(load["num_waiting_reqs"]), "drain_s": drained,
            "rss_before_mib": rss_before, "rss_after_mib": rss_mib(unit.proc.pid)}


def capacity(unit: ServerProcess, seconds: float, concurrency: int, max_tokens: int, seed: int) -> float:
    """Requests per second the unit completes, closed loop at ``concurrency`` (the overload's 1x)."""
    rng = random.Random(seed)
    done = 0

    async def loop() -> None:
        nonlocal done
        deadline = time.monotonic() + seconds
        async with httpx.AsyncClient(base_url=unit.base_url, timeout=300) as client:
            async def worker() -> None:
                nonlocal done
                while time.monotonic() < deadline:
                    r = await client.post("/v1/chat/completions", json=body(rng, max_tokens, False))
                    done += r.status_code == 200
            await asyncio.gather(*(worker() for _ in range(concurrency)))

    t0 = time.monotonic()
    asyncio.run(loop())
    return done / (time.monotonic() - t0)


async def _one_overload_request(client: httpx.AsyncClient, rng: random.Random, max_tokens: int,
                                timeout_s: float, tally: Counter[str], waits: list[float]) -> None:
    stream = rng.random() < 0.5
    t0 = time.monotonic()
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("POST", "/v1/chat/completions", json=body(rng, max_tokens, stream)) as r:
                text = (await r.aread()).decode("utf-8", "replace")
    except TimeoutError:
        tally["hung"] += 1  # NOTE: no answer within the client's timeout; leaving frees the request's KV
        return
    except httpx.HTTPError as exc:
        tally[f"failed: {type(exc).__name__}"] += 1
        return
    if r.status_code in REFUSALS:
        tally["refused" if r.headers.get("retry-after") else f"refused {r.status_code} without Retry-After"] += 1
        return
    complete = r.status_code == 200 and (("data: [DONE]" in text) if stream else _has_content(text))
    tally["answered" if complete else f"failed: status {r.status_code}"] += 1
    if complete:
        waits.append(time.monotonic() - t0)


def _has_content(text: str) -> bool:
    try:
        return bool(json.loads(text)["choices"][0]["message"]["content"])
    except (ValueError, KeyError, IndexError, TypeError):
        return False


def overload(unit: ServerProcess, rate: float, seconds: float, max_tokens: int, timeout_s: float,
             seed: int) -> dict[str, Any]:
    """Poisson arrivals at ``rate`` for ``seconds``; each request answered, refused or hung; the pool sampled."""
    rng = random.Random(seed)
    tally: Counter[str] = Counter()
    waits: list[float] = []
    sampler = LoadSampler(unit.base_url, 0.5)

    async def run() -> int:
        stop = asyncio.Event()
        sampling = asyncio.get_running_loop().create_task(sampler.run(time.perf_counter(), stop))
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
        sent = 0
        async with httpx.AsyncClient(base_url=unit.base_url, timeout=None, limits=limits) as client:
            tasks = []
            t_end = time.monotonic() + seconds
            next_at = time.monotonic()
            while next_at < t_end:
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                tasks.append(asyncio.create_task(
                    _one_overload_request(client, rng, max_tokens, timeout_s, tally, waits)))
                sent += 1
                next_at += rng.expovariate(rate)
            await asyncio.gather(*tasks)
        stop.set()
        await sampling
        return sent

    t0 = time.monotonic()
    sent = asyncio.run(run())
    timeline = sampler.timeline()
    alive = unit.proc is not None and unit.proc.poll() is None
    waits.sort()
    return {"rate": rate, "seconds": seconds, "sent": sent, "outcomes": dict(tally), "wall_s": time.monotonic() - t0,
            "kv_peak": int(timeline.kv_used.max()) if len(timeline.t) else None, "capacity": timeline.capacity,
            "samples": len(timeline.t), "alive": alive,
            "answered_p50_s": waits[len(waits) // 2] if waits else None,
            "answered_p99_s": waits[int(0.99 * (len(waits) - 1))] if waits else None}


def kill_scheduler(unit: ServerProcess, exit_timeout_s: float = 120) -> dict[str, Any]:
    """SIGKILL the single server's scheduler under a light load: how the unit ends, and what is left."""
    assert unit.proc is not None
    victims = schedulers(unit.proc.pid)
    group = [p.pid for p in tree(unit.proc.pid)]
    rng = random.Random(0)

    async def inflight() -> Counter[str]:
        out: Counter[str] = Counter()
        async with httpx.AsyncClient(base_url=unit.base_url, timeout=60) as client:
            async def one() -> None:
                try:
                    r = await client.post("/v1/chat/completions", json=body(rng, 64, False))
                    out[f"status {r.status_code}"] += 1
                except httpx.TimeoutException:
                    out["hung"] += 1
                except httpx.HTTPError as exc:
                    out[f"connection lost ({type(exc).__name__})"] += 1
            tasks = [asyncio.create_task(one()) for _ in range(4)]
            await asyncio.sleep(1.0)
            killed_at["at"] = time.monotonic()
            for p in victims:
                os.kill(p.pid, signal.SIGKILL)
            await asyncio.gather(*tasks)
        return out

    killed_at: dict[str, float] = {}
    requests = asyncio.run(inflight())
    try:
        code: int | None = unit.proc.wait(timeout=exit_timeout_s)
    except subprocess.TimeoutExpired:  # NOTE: reported as "never", then stopped below
        code = None
    exited_s = time.monotonic() - killed_at["at"]
    orphans = [pid for pid in group if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    if code is None:
        unit.stop(signal.SIGKILL)
    return {"killed": [p.pid for p in victims], "exit_code": code, "exit_s": exited_s if code is not None else None,
            "orphans": orphans, "in_flight": dict(requests)}


def kill_worker_scheduler(unit: ServerProcess, worker_port: int, restart_timeout_s: float = 300) -> dict[str, Any]:
    """SIGKILL one cluster worker's scheduler under load: requests' fate, and time until it serves again."""
    assert unit.proc is not None
    worker = f"http://127.0.0.1:{worker_port}"
    victims = [p for p in schedulers(unit.proc.pid) if _serves(p, worker_port)]
    tally: Counter[str] = Counter()
    stop = asyncio.Event()
    rng = random.Random(1)

    async def load() -> None:
        async with httpx.AsyncClient(base_url=unit.base_url, timeout=120) as client:
            async def worker_loop() -> None:
                while not stop.is_set():
                    try:
                        r = await client.post("/v1/chat/completions", json=body(rng, 8, False))
                        ok = r.status_code == 200
                        refused = r.status_code in REFUSALS and r.headers.get("retry-after")
                        tally["answered" if ok else "refused" if refused else f"status {r.status_code}"] += 1
                    except httpx.TimeoutException:
                        tally["hung"] += 1
                    except httpx.HTTPError as exc:
                        tally[f"failed: {type(exc).__name__}"] += 1
            await asyncio.gather(*(worker_loop() for _ in range(3)))

    times: dict[str, float] = {}

    async def run() -> None:
        task = asyncio.create_task(load())
        await asyncio.sleep(5.0)
        times["killed"] = time.monotonic()
        for p in victims:
            os.kill(p.pid, signal.SIGKILL)
        deadline = times["killed"] + restart_timeout_s
        down_seen = False
        while time.monotonic() < deadline:
            up = await asyncio.to_thread(healthy, worker)
            if not up and not down_seen:
                down_seen, times["down"] = True, time.monotonic()
            if up and down_seen:
                times["up"] = time.monotonic()
                break
            await asyncio.sleep(0.5)
        await asyncio.sleep(5.0)  # NOTE: served again through the gateway after the restart
        stop.set()
        await task

    asyncio.run(run())
    k = times["killed"]
    return {"killed": [p.pid for p in victims], "down_s": times["down"] - k if "down" in times else None,
            "serving_again_s": times["up"] - k if "up" in times else None, "requests": dict(tally),
            "unit_alive": unit.proc.poll() is None}


def _serves(p: psutil.Process, port: int) -> bool:
    """Whether scheduler ``p`` belongs to the worker on ``port`` (its inherited plan file names the port)."""
    try:
        return bool(p.environ().get("SWITCHBOARD_PLAN", "").endswith(f"plan-{port}.json"))
    except psutil.Error:
        return False


def healthy(url: str, timeout: float = 2) -> bool:
    """Whether ``url`` answers ``/health`` with 200 within ``timeout`` seconds (no answer: ``False``)."""
    try:
        return httpx.get(url + "/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False
