"""A tiny in-process stand-in for an SGLang server (aiohttp, its own thread).

It streams like SGLang's ``/generate`` (cumulative text, ``meta_info`` with
``completion_tokens`` and ``cached_tokens``) and ``/v1/completions`` (OpenAI
chunks, then ``[DONE]``), answers ``/v1/loads`` and ``/flush_cache``, and
counts cached tokens the way a radix cache does: the longest common prefix
with any earlier prompt (at most ``len - 1``). A prompt of ``reject_len``
tokens gets HTTP 429, as ``+admission=max_queue`` answers.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field

from aiohttp import web

from bench.live.server import free_port


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@dataclass
class Seen:
    """One request the fake server answered."""

    path: str
    body: dict
    received_s: float
    cached: int = 0


@dataclass
class FakeSGLang:
    token_delay_s: float = 0.004
    reject_len: int | None = None
    vocab_size: int = 49152
    prompts: list[list[int]] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    running: int = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/generate", self.generate)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/v1/loads", self.loads)
        app.router.add_post("/flush_cache", self.flush)
        app.router.add_post("/v1/detokenize", self.detokenize)
        return app

    def _admit(self, path: str, body: dict, ids: list[int]) -> Seen | None:
        seen = Seen(path, body, time.perf_counter())
        self.seen.append(seen)
        if self.reject_len is not None and len(ids) == self.reject_len:
            return None
        seen.cached = min(max((common_prefix(ids, p) for p in self.prompts), default=0), len(ids) - 1)
        self.prompts.append(list(ids))
        return seen

    async def _stream(self, request: web.Request, chunks) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        self.running += 1
        try:
            for data in chunks:
                await asyncio.sleep(self.token_delay_s)
                await resp.write(f"data: {json.dumps(data)}\n\n".encode())
            await resp.write(b"data: [DONE]\n\n")
        finally:
            self.running -= 1
        return resp

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        ids, n = body["input_ids"], body["sampling_params"]["max_new_tokens"]
        seen = self._admit("/generate", body, ids)
        if seen is None:
            return web.json_response({"error": "queue full"}, status=429)
        chunks = ({"text": "tok " * i, "meta_info": {"id": "x", "completion_tokens": i,
                                                     "cached_tokens": seen.cached, "prompt_tokens": len(ids)}}
                  for i in range(1, n + 1))
        return await self._stream(request, chunks)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        ids, n = body["prompt"], body["max_tokens"]
        if self._admit("/v1/completions", body, ids) is None:
            return web.json_response({"error": "queue full"}, status=429)
        chunks = ({"choices": [{"index": 0, "text": "tok "}]} for _ in range(n))
        return await self._stream(request, chunks)

    async def loads(self, request: web.Request) -> web.Response:
        return web.json_response({"loads": [{
            "num_waiting_reqs": 0, "num_running_reqs": self.running, "num_used_tokens": 10 * self.running,
            "max_total_num_tokens": 1000, "total_prefill_busy_us": 0}]})

    async def detokenize(self, request: web.Request) -> web.Response:
        """As HF tokenizers: ids past the vocabulary decode to nothing."""
        tokens = (await request.json())["tokens"]
        return web.json_response({"text": "".join("x" for t in tokens if t < self.vocab_size)})

    async def flush(self, request: web.Request) -> web.Response:
        self.prompts.clear()
        return web.Response(text="ok")


class Running:
    """A ``FakeSGLang`` served on a free port from a background thread."""

    def __init__(self, fake: FakeSGLang) -> None:
        self.fake = fake
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.loop = asyncio.new_event_loop()
        self.runner = web.AppRunner(fake.app())
        started = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self.runner.setup())
            self.loop.run_until_complete(web.TCPSite(self.runner, "127.0.0.1", self.port).start())
            started.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        assert started.wait(10), "fake server did not start"

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
