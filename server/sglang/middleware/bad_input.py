"""A request body SGLang's validators crash on gets a 400, not a 500.

SGLang 0.5.23's request models run ``mode="before"`` validators that assume
their input's shape (``values.get(...)``, ``response_format.get(...)``): a body
that is a JSON string, or a ``response_format`` that is a list, raises
``AttributeError`` inside pydantic, which pydantic does not turn into a
validation error, so FastAPI answers 500 (found by ``bench.live.fuzz``, seed
31). This ASGI middleware, installed on SGLang's FastAPI app in the HTTP
process, answers such a crash with SGLang's own 400 error shape.

NOTE: only a crash raised while FastAPI validates the request body (a frame of
``REQUEST_VALIDATION`` on the traceback) and before any response started: the
handler never ran, so nothing was queued, no KV allocated and nothing is lost.
Every other exception propagates untouched and stays a 500: an engine bug must
not be reported as the client's fault.
"""

from __future__ import annotations

import json
import logging
from types import TracebackType

from server.sglang.middleware.asgi import App, Message, Receive, Scope, Send

#: The FastAPI function that validates a request body against the endpoint's model
#: (a row of the hook contract, ``server/sglang/launch/contract.py``).
REQUEST_VALIDATION = ("fastapi.dependencies.utils", "request_body_to_args")

log = logging.getLogger("switchboard")


def raised_validating_the_body(tb: TracebackType | None) -> bool:
    """Whether a traceback passes through FastAPI's request-body validation."""
    module, function = REQUEST_VALIDATION
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == function and frame.f_globals.get("__name__") == module:
            return True
        tb = tb.tb_next
    return False


def bad_request_body(exc: BaseException) -> bytes:
    """SGLang's ``ErrorResponse`` shape, naming what failed without a traceback."""
    message = f"invalid request body: {type(exc).__name__}: {exc}"[:500]
    return json.dumps({"object": "error", "message": message, "type": "Bad Request",
                       "param": None, "code": 400}).encode()


class BadInputMiddleware:
    """Answer 400 to a crash in request-body validation (see module docs)."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:
            if started or not raised_validating_the_body(exc.__traceback__):
                raise
            log.warning("400 for %s %s: %s: %s", scope.get("method"), scope.get("path"),
                        type(exc).__name__, str(exc)[:200])
            body = bad_request_body(exc)
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body, "more_body": False})
