"""SessionIdMiddleware: the session a request names reaches SGLang's body field."""

from __future__ import annotations

import asyncio
import json

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from server.sglang.middleware.sessions import SessionIdMiddleware, session_id_for


async def echo(request: Request):
    return JSONResponse({"body": json.loads(await request.body()),
                         "length": request.headers["content-length"]})


APP = SessionIdMiddleware(Starlette(routes=[Route("/v1/chat/completions", echo, methods=["POST"]),
                                            Route("/other", echo, methods=["POST"])]))


def post(path: str, body: dict, headers: dict | None = None) -> dict:
    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=APP), base_url="http://t") as c:
            return (await c.post(path, json=body, headers=headers or {})).json()
    return asyncio.run(go())


def test_precedence_body_then_header_then_user():
    assert session_id_for({"session_id": "b", "user": "u"}, "h") == "b"
    assert session_id_for({"user": "u"}, "h") == "h"
    assert session_id_for({"user": "u"}, None) == "u"
    assert session_id_for({}, None) is None


def test_header_is_written_into_the_body_with_a_correct_length():
    out = post("/v1/chat/completions", {"messages": []}, {"X-Session-Id": "s-42"})
    assert out["body"]["session_id"] == "s-42"
    assert int(out["length"]) == len(json.dumps(out["body"]).encode())


def test_user_field_is_the_fallback_and_body_wins():
    assert post("/v1/chat/completions", {"user": "alice"})["body"]["session_id"] == "alice"
    assert post("/v1/chat/completions", {"session_id": "mine"}, {"X-Session-Id": "h"})["body"]["session_id"] == "mine"
    assert "session_id" not in post("/v1/chat/completions", {"messages": []})["body"]


def test_other_paths_are_untouched():
    assert "session_id" not in post("/other", {"user": "alice"})["body"]
