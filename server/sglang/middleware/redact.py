"""Keys out of SGLang's server-info answers.

SGLang 0.5.23's ``/server_info`` (and the deprecated ``/get_server_info``, which
SMG forwards) answers with every ``ServerArgs`` field, ``api_key`` and
``admin_api_key`` included, to any caller holding the plain API key: a client
could read the admin key there. This ASGI middleware, installed on SGLang's
FastAPI app in the HTTP process, replaces every key's value in those answers
with ``<redacted>``; all other responses pass untouched (streams included).
"""

from __future__ import annotations

from server.auth import Keys, redact
from server.sglang.middleware.asgi import App, Message, Receive, Scope, Send

#: Paths whose answers carry ServerArgs (the scheduler's copy too, under ``internal_states``).
SERVER_INFO_PATHS = frozenset({"/server_info", "/get_server_info"})


class RedactKeysMiddleware:
    """Replace every key of ``keys`` in server-info answers by ``<redacted>``."""

    def __init__(self, app: App, keys: Keys) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") not in SERVER_INFO_PATHS or not self.keys.values():
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        body = bytearray()

        async def buffered(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] != "http.response.body":
                await send(message)
                return
            body.extend(message.get("body", b""))
            if message.get("more_body", False):
                return
            # NOTE: keys are ASCII without quotes or backslashes (server.auth), so a
            # key reads the same inside the JSON text as outside it.
            text = redact(body.decode("utf-8", "replace"), self.keys).encode()
            assert start is not None  # NOTE: ASGI sends the start before any body
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            await send({**start, "headers": [*headers, (b"content-length", str(len(text)).encode())]})
            await send({"type": "http.response.body", "body": text, "more_body": False})

        await self.app(scope, receive, buffered)
