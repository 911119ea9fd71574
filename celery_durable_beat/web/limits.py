"""What the server refuses before any handler runs, and what its access log leaves out."""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from celery_durable_beat.logs import log_extra
from celery_durable_beat.model import Action

log = logging.getLogger("celery_durable_beat.web")

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}
"""Sent with every answer, errors and refusals included (``Guard``)."""


class Guard:
    """The outermost layer: every answer gets ``SECURITY_HEADERS`` (and ``Cache-Control:
    no-store`` outside ``/static``: answers carry schedules and session pages), whoever wrote
    it (a handler, ``BodyLimit``, starlette's routing); and a failure nothing else answered
    becomes a 500 in the ``{"error"}`` shape, its traceback never shown to the client but
    logged here (action ``request_failed``, the method and path: never the query, which may
    carry a cursor or filter, nor the body). It is not raised on: uvicorn would then close
    the connection, and the client would see a reset instead of the answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False
        static = str(scope.get("path", "")).startswith("/static/")

        async def send_with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
                if not static:
                    headers.setdefault("Cache-Control", "no-store")
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        except Exception:
            log.exception(
                "request failed: %s %s",
                scope.get("method", "?"),
                scope.get("path", "?"),
                extra=log_extra(Action.REQUEST_FAILED),
            )
            if not started:
                await _error(send_with_headers, 500, "internal", "the server failed; see its log")


MAX_BODY = 1024 * 1024
"""Largest request body accepted (1 MiB): a schedule entry is a few hundred bytes."""


class BodyLimit:
    """Answers 413 to a body over ``MAX_BODY``, declared or streamed, before the app reads it."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await _too_large(send)
            return
        chunks: list[Message] = []
        size = 0
        while True:  # bodies here are small: read them whole, then replay them to the app
            message = await receive()
            chunks.append(message)
            size += len(message.get("body", b""))
            if size > self.limit:
                await _too_large(send)
                return
            if message["type"] != "http.request" or not message.get("more_body"):
                break

        async def replay() -> Message:
            return chunks.pop(0) if chunks else await receive()

        await self.app(scope, replay, send)


async def _too_large(send: Send) -> None:
    await _error(send, 413, "too_large", f"the request body exceeds {MAX_BODY} bytes")


async def _error(send: Send, status: int, code: str, message: str) -> None:
    """An error answer written below the app (no response class there)."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class NoQueryInAccessLog(logging.Filter):
    """uvicorn's access log without query strings: a token or cursor pasted into a URL by
    mistake never reaches a log (tokens are only read from headers and the cookie anyway)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args: Any = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], args[2].split("?", 1)[0], *args[3:])
        return True
