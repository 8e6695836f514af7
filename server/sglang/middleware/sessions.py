"""Which session a request belongs to, carried to SGLang's scheduler.

A client names its session with an ``X-Session-Id`` header or a ``session_id``
field in the request body (an extra parameter of the OpenAI API); failing
both, OpenAI's ``user`` field is used. SGLang already carries a body
``session_id`` from the HTTP layer to the scheduler's ``Req.session_id``
(without ``--enable-session-radix-cache`` it changes nothing else), so this
ASGI middleware only writes the header's or ``user``'s value into the body
when the body has none.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from server.sglang.middleware.asgi import Message, Receive, Scope, Send

SESSION_HEADER = b"x-session-id"
GENERATION_PATHS = ("/v1/chat/completions", "/v1/completions", "/generate")


def session_id_for(body: dict[str, Any], header: str | None) -> str | None:
    """The session a request names: body ``session_id``, header, then ``user``."""
    for value in (body.get("session_id"), header, body.get("user")):
        if isinstance(value, str) and value:
            return value
    return None


class SessionIdMiddleware:
    """Writes the request's session id into the JSON body of generation requests."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("path") not in GENERATION_PATHS:
            await self.app(scope, receive, send)
            return
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # client gone before the body arrived
                await self.app(scope, _replay([message], receive), send)
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        raw = b"".join(chunks)
        headers = dict(scope.get("headers") or [])
        header = headers.get(SESSION_HEADER)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None  # NOTE: not JSON: SGLang answers it as it would anyway
        if isinstance(body, dict) and body.get("session_id") is None:
            sid = session_id_for(body, header.decode("latin-1") if header else None)
            if sid is not None:
                body["session_id"] = sid
                raw = json.dumps(body).encode()
                scope = dict(scope, headers=[(k, v) for k, v in scope["headers"] if k != b"content-length"]
                             + [(b"content-length", str(len(raw)).encode())])
        await self.app(scope, _replay([{"type": "http.request", "body": raw, "more_body": False}], receive), send)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A ``receive`` that first returns ``messages``, then the real ones (disconnects)."""
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed
