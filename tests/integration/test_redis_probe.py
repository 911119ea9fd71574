"""The redelivery sweep's probe of a Redis broker (``publish/redis_probe.py``), on real kombu
messages: what it finds in a queue's lists and in kombu's ``unacked`` hash, and when it does not
look."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery

from celery_durable_beat.publish.redis_probe import RedisProbe
from celery_durable_beat.redelivery import Presence

pytestmark = pytest.mark.integration


@pytest.fixture
def app(redis_url: str) -> Iterator[Celery]:
    celery = Celery("probe-test", broker=redis_url, set_as_current=False)
    celery.conf.broker_transport_options = {"priority_steps": [0, 3, 6, 9]}
    yield celery
    celery.close()


def send(app: Celery, task_id: str, queue: str = "celery", **options: Any) -> None:
    app.send_task("t.x", args=[{"id": "not-a-task-id"}], task_id=task_id, queue=queue, **options)


def test_a_message_is_found_in_any_priority_list_and_in_unacked(
    app: Celery, redis_url: str
) -> None:
    send(app, "in-the-list")
    send(app, "high-priority", priority=9)
    send(app, "fetched")
    client = redis.Redis.from_url(redis_url)
    # What a worker's fetch does: the message leaves the list for kombu's unacked hash.
    raw = next(m for m in client.lrange("celery", 0, -1) if b"fetched" in m)
    client.lrem("celery", 1, raw)
    client.hset("unacked", "tag-1", json.dumps([json.loads(raw), "", "celery"]))
    found = RedisProbe(app).presence(
        {"celery": ["in-the-list", "high-priority", "fetched", "never-sent", "not-a-task-id"]}
    )
    assert found == {
        "in-the-list": Presence.PRESENT,
        "high-priority": Presence.PRESENT,
        "fetched": Presence.PRESENT,
        "never-sent": Presence.ABSENT,
        "not-a-task-id": Presence.ABSENT,  # a value in the arguments is no message's id
    }
    assert RedisProbe(app).presence({"other": ["in-the-list"]}) == {"in-the-list": Presence.ABSENT}
    client.close()


def test_a_queue_longer_than_the_scan_limit_is_not_read(app: Celery) -> None:
    for n in range(5):
        send(app, f"tick-{n}")
    assert RedisProbe(app, scan_most=4).presence({"celery": ["tick-0"]}) == {
        "tick-0": Presence.UNKNOWN
    }
    assert RedisProbe(app, scan_most=5).presence({"celery": ["tick-0", "tick-9"]}) == {
        "tick-0": Presence.PRESENT,
        "tick-9": Presence.ABSENT,
    }


def test_a_broker_that_does_not_answer_tells_nothing_at_once() -> None:
    app = Celery("probe-down", broker="redis://127.0.0.1:1/0", set_as_current=False)
    started = time.monotonic()
    assert RedisProbe(app).presence({"celery": ["a", "b"]}) == {
        "a": Presence.UNKNOWN,
        "b": Presence.UNKNOWN,
    }
    # Beat's loop waits for the probe: one attempt, not kombu's retries (6 s here before).
    assert time.monotonic() - started < 2.0
