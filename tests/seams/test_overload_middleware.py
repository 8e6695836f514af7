"""RetryAfterMiddleware on a small Starlette app standing in for SGLang's FastAPI app."""

from __future__ import annotations

import asyncio
import json

import httpx
from starlette.applications import Starlette
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from policies.admission import AdmissionAction, AdmissionDecision
from server.sglang.middleware.retry_after import RetryAfterMiddleware, rejection_message, retry_after_from


async def rejected(request):
    msg = rejection_message(AdmissionDecision(AdmissionAction.REJECT, retry_after_s=4.2, reason="queue full"))
    return JSONResponse({"object": "error", "message": msg, "code": 429}, status_code=429)


async def sglang_503(request):
    return JSONResponse({"object": "error", "message": "The request queue is full.", "code": 503}, status_code=503)


def sse(*chunks: str):
    async def gen():
        for c in chunks:
            yield c
    return StreamingResponse(gen(), media_type="text/event-stream")


async def stream_rejected(request):
    error = {"error": {"object": "error", "message": "x; retry after 7 s", "type": "TOO_MANY_REQUESTS", "code": 429}}
    return sse(f"data: {json.dumps(error)}\n\n", "data: [DONE]\n\n")


async def stream_ok(request):
    return sse('data: {"choices": []}\n\n', "data: [DONE]\n\n")


APP = RetryAfterMiddleware(Starlette(routes=[Route(p, f, methods=["POST"]) for p, f in [
    ("/rejected", rejected), ("/busy", sglang_503), ("/stream_rejected", stream_rejected), ("/stream_ok", stream_ok)]]))


def post(path: str) -> httpx.Response:
    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=APP), base_url="http://t") as c:
            return await c.post(path)
    return asyncio.run(go())


def test_rejection_message_round_trips_retry_after():
    msg = rejection_message(AdmissionDecision(AdmissionAction.REJECT, retry_after_s=0.2, reason="r"))
    assert msg.endswith("retry after 1 s") and retry_after_from(msg) == 1
    assert retry_after_from("no hint here") == 1


def test_429_gets_retry_after_from_the_decision():
    r = post("/rejected")
    assert r.status_code == 429 and r.headers["retry-after"] == "5"


def test_sglangs_own_503_gets_a_default_retry_after():
    r = post("/busy")
    assert r.status_code == 503 and r.headers["retry-after"] == "1"


def test_stream_whose_first_chunk_is_an_overload_error_becomes_a_real_429():
    r = post("/stream_rejected")
    assert r.status_code == 429 and r.headers["retry-after"] == "7"
    assert r.headers["content-type"] == "application/json"
    assert r.json()["error"]["code"] == 429


def test_normal_stream_passes_through_untouched():
    r = post("/stream_ok")
    assert r.status_code == 200 and "retry-after" not in r.headers
    assert r.text == 'data: {"choices": []}\n\ndata: [DONE]\n\n'


async def stream_bad_request(request):
    error = {"error": {"object": "error", "message": "needs 1200 KV tokens", "type": "BAD_REQUEST", "code": 400}}
    return sse(f"data: {json.dumps(error)}\n\n", "data: [DONE]\n\n")


APP.app.router.routes.append(Route("/stream_bad", stream_bad_request, methods=["POST"]))


def test_stream_starting_with_a_request_error_becomes_a_real_400_without_retry_after():
    r = post("/stream_bad")
    assert r.status_code == 400 and "retry-after" not in r.headers
    assert "1200 KV tokens" in r.json()["error"]["message"]
