"""BadInputMiddleware over a FastAPI app that validates with SGLang's own request models."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fastapi import FastAPI

from server.sglang.launch.stub import install_sgl_kernel_stub
from server.sglang.middleware.bad_input import BadInputMiddleware

install_sgl_kernel_stub()  # NOTE: before the first SGLang import

from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest  # noqa: E402

CHAT = {"model": "default", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def sglang_like_app(guarded: bool = False) -> FastAPI:
    """NOTE: ``add_middleware``, as the launcher does: inside Starlette's ServerErrorMiddleware,
    which answers 500 itself before re-raising, so a guard outside it would come too late."""
    app = FastAPI()
    if guarded:
        app.add_middleware(BadInputMiddleware)

    @app.post("/v1/chat/completions")
    async def chat(request: ChatCompletionRequest) -> dict:
        if request.user == "engine-bug":
            raise RuntimeError("a bug after validation")
        return {"ok": request.max_tokens}

    return app


def post(app, content: bytes) -> httpx.Response:
    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            return await c.post("/v1/chat/completions", content=content,
                                headers={"content-type": "application/json"})
    return asyncio.run(go())


#: Bodies SGLang 0.5.23's ``mode="before"`` validators crash on (bench.live.fuzz, seed 31).
CRASHING = {
    "a JSON string": b'"text"',
    "a list response_format": b'{"model": "default", "messages": [], "response_format": [1, 2]}',
    "a string response_format": b'{"model": "default", "messages": [], "response_format": "json"}',
}


@pytest.mark.parametrize("name", CRASHING)
def test_a_body_sglangs_validators_crash_on_gets_400_naming_the_error(name):
    with pytest.raises(AttributeError):  # the reference: stock SGLang's app lets it escape (a 500)
        post(sglang_like_app(), CRASHING[name])
    r = post(sglang_like_app(guarded=True), CRASHING[name])
    assert r.status_code == 400
    body = r.json()
    assert body["object"] == "error" and body["code"] == 400
    assert body["message"].startswith("invalid request body: AttributeError: ")


def test_valid_and_plainly_invalid_bodies_pass_untouched():
    app = sglang_like_app(guarded=True)
    assert post(app, httpx.Request("POST", "/", json=CHAT).content).json() == {"ok": 4}
    assert post(app, b'{"model": "default"}').status_code == 422  # pydantic's own error, not ours


def test_an_exception_after_validation_stays_a_server_error():
    body = httpx.Request("POST", "/", json={**CHAT, "user": "engine-bug"}).content
    with pytest.raises(RuntimeError, match="a bug after validation"):
        post(sglang_like_app(guarded=True), body)
