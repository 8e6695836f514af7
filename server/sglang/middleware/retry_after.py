"""Overload answers: 429/503 with ``Retry-After``, for plain and streaming requests.

The scheduler process rejects a request by aborting it with status 429 and a
message ending in ``retry after N s`` (``rejection_message``). SGLang turns that
into an HTTP 429 for non-streaming requests, but a streaming request has
already been answered 200 when its first chunk is the error. The ASGI
middleware below, installed on SGLang's FastAPI app in the HTTP process,
(a) turns a stream whose *first* chunk is a 400/429/503 error into a real
response with that status and (b) adds ``Retry-After`` to every 429/503 (SGLang's own 503s
included, which carry no hint: they get ``DEFAULT_RETRY_AFTER_S``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Awaitable, Callable
from typing import Any

from policies.admission import AdmissionDecision
from server.sglang.middleware.asgi import Message, Receive, Scope, Send

DEFAULT_RETRY_AFTER_S = 1
OVERLOAD_STATUSES = (429, 503)
#: Errors a stream may start with that deserve a real HTTP status.
STREAM_ERROR_STATUSES = (400, *OVERLOAD_STATUSES)
_RETRY_RE = re.compile(r"retry after (\d+) s")


def rejection_message(decision: AdmissionDecision) -> str:
    """Client-facing text of a rejection; ``retry_after_from`` reads it back."""
    seconds = max(0, math.ceil(decision.retry_after_s))
    reason = decision.reason or "admission rejected the request"
    return f"Switchboard admission: {reason}; retry after {seconds} s"


def retry_after_from(text: str) -> int:
    """The ``retry after N s`` hint in an error text, else the default."""
    match = _RETRY_RE.search(text)
    return int(match.group(1)) if match else DEFAULT_RETRY_AFTER_S


def _stream_error(chunk: bytes) -> tuple[int, dict[str, Any]] | None:
    """``(status, error)`` if an SSE chunk is a request or overload error object."""
    text = chunk.decode("utf-8", "replace").strip()
    if not text.startswith("data:"):
        return None
    try:
        payload = json.loads(text[len("data:"):].strip().split("\n", 1)[0])
    except ValueError:
        return None
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict) and error.get("code") in STREAM_ERROR_STATUSES:
        return int(error["code"]), error
    return None


class RetryAfterMiddleware:
    """ASGI middleware giving overload answers a real status and ``Retry-After``."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        held: list[Message] = []  # the response start, until the first body chunk
        done = False

        async def wrapped_send(message: Message) -> None:
            nonlocal done
            if done:
                return  # an overload stream was already answered in full
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers") or [])
                streaming = headers.get(b"content-type", b"").startswith(b"text/event-stream")
                if message["status"] in OVERLOAD_STATUSES or streaming:
                    held.append(message)
                    return
            elif message["type"] == "http.response.body" and held:
                start = held.pop()
                body = message.get("body", b"")
                if start["status"] in OVERLOAD_STATUSES:
                    text = body.decode("utf-8", "replace")
                    await send(_with_retry_after(start, retry_after_from(text)))
                else:
                    error = _stream_error(body)
                    if error is not None:
                        status, payload = error
                        done = True
                        retry = (retry_after_from(str(payload.get("message", "")))
                                 if status in OVERLOAD_STATUSES else None)
                        await _send_json(send, status, {"error": payload}, retry)
                        return
                    await send(start)
            await send(message)

        await self.app(scope, receive, wrapped_send)


def _with_retry_after(start: Message, seconds: int) -> Message:
    headers = [h for h in start.get("headers", []) if h[0].lower() != b"retry-after"]
    headers.append((b"retry-after", str(seconds).encode()))
    return {**start, "headers": headers}


async def _send_json(send: Send, status: int, content: dict[str, Any], retry_after: int | None) -> None:
    body = json.dumps(content).encode()
    start = {
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode())],
    }
    await send(start if retry_after is None else _with_retry_after(start, retry_after))
    await send({"type": "http.response.body", "body": body, "more_body": False})
