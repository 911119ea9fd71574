"""``web/limits.Guard``: a failure nothing else answered is a 500 in the error shape, logged
with its traceback (action ``request_failed``), and the connection is not reset."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from starlette.types import Message, Receive, Scope, Send

from celery_durable_beat.web.limits import Guard

pytestmark = pytest.mark.unit


async def failing_app(scope: Scope, receive: Receive, send: Send) -> None:
    raise RuntimeError("a bug nobody foresaw")


def call(path: str) -> list[Message]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": path, "query_string": b"cursor=s3cret"}
    asyncio.run(Guard(failing_app)(scope, receive, send))  # raises nothing: answered here
    return sent


def test_an_unforeseen_failure_is_a_logged_500_in_the_error_shape(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="celery_durable_beat.web"):
        sent = call("/api/v1/schedules")
    start, body = sent[0], sent[-1]
    assert start["status"] == 500
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    assert headers["x-frame-options"] == "DENY" and headers["cache-control"] == "no-store"
    assert json.loads(body["body"])["error"]["code"] == "internal"
    assert b"a bug nobody foresaw" not in body["body"]
    (record,) = [r for r in caplog.records if getattr(r, "action", "") == "request_failed"]
    assert record.exc_info is not None and "GET /api/v1/schedules" in record.getMessage()
    assert "s3cret" not in record.getMessage()
