"""The Celery publisher against real Redis brokers: routing errors quarantine, outages recover."""

from __future__ import annotations

import pytest
import redis
from celery import Celery

from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.model import ScheduleState
from celery_durable_beat.publish.celery_publisher import CeleryPublisher
from celery_durable_beat.schedules.validate import validate_entries
from celery_durable_beat.store.sql import SqlStore
from celery_durable_beat.sync import sync_definitions
from tests.support.procs import ThrowawayRedis

pytestmark = pytest.mark.integration
T0 = 1_780_000_000_000


@pytest.fixture
def leader_epoch() -> int:
    return 1


@pytest.fixture
def store(pg_store: SqlStore) -> SqlStore:
    """PostgreSQL only: the broker is what these tests are about."""
    return pg_store


def _app(broker: str) -> Celery:
    app = Celery("pub", broker=broker, set_as_current=False)
    app.conf.task_create_missing_queues = False
    app.conf.broker_connection_timeout = 1
    return app


def _queued_ids(client: redis.Redis, queue: str = "celery") -> list[str]:
    import json

    return [json.loads(raw)["headers"]["id"] for raw in client.lrange(queue, 0, -1)]


def test_headers_reach_the_broker_and_routing_errors_quarantine(
    store: SqlStore, redis_url: str
) -> None:
    sync_definitions(
        store,
        validate_entries(
            {
                "good": {"task": "t", "schedule": "@every 1s", "options": {"expires": 3600}},
                "bad": {
                    "task": "t",
                    "schedule": "@every 1s",
                    "options": {"queue": "no-such-queue"},
                },
            }
        ),
        T0,
    )
    app = _app(redis_url)
    dispatcher = Dispatcher(store, CeleryPublisher(app), quarantine_after=3)
    now = T0
    for _ in range(15):
        now = max(now + 1000, store.earliest_due_ms() or now)
        dispatcher.run_round(now, 1)
    client = redis.Redis.from_url(redis_url)
    raw = client.lrange("celery", 0, 0)[0]
    import json

    message = json.loads(raw)
    assert message["headers"]["periodic_schedule"] == "good"
    assert message["headers"]["periodic_task_name"] == "good"  # django-celery-results' column
    assert message["headers"]["id"] == tick_task_id("good", message["headers"]["periodic_tick_ms"])
    assert message["headers"]["expires"] is not None  # the entry's options applied
    assert store.get("bad").state is ScheduleState.QUARANTINED
    assert [e.reason for e in store.history("bad", 10)][:2] == ["quarantined", "routing_error"]
    assert len(set(_queued_ids(client))) == client.llen("celery") >= 10
    client.close()


def test_broker_outage_then_recovery(store: SqlStore) -> None:
    server = ThrowawayRedis()
    server.start()
    try:
        sync_definitions(
            store,
            validate_entries({"s": {"task": "t", "schedule": "@every 1s", "missed": "backfill"}}),
            T0,
        )
        dispatcher = Dispatcher(store, CeleryPublisher(_app(server.url)))
        assert dispatcher.run_round(T0 + 1000, 1).outcomes()["enqueued"] == 1
        server.stop()
        down = dispatcher.run_round(T0 + 2000, 1)
        assert down.broker_unavailable and down.outcomes()["failed"] == 1
        assert store.get("s").state is ScheduleState.ACTIVE
        assert store.history("s", 1)[0].reason == "broker_unavailable"
        server.start()
        up = dispatcher.run_round(T0 + 3000, 1)
        assert up.outcomes()["enqueued"] == 2  # backfill: the failed tick, then the current one
        client = redis.Redis.from_url(server.url)
        # the restarted server kept nothing (no persistence): only what was sent after it
        assert _queued_ids(client)[::-1] == [tick_task_id("s", T0 + t) for t in (2000, 3000)]
        client.close()
    finally:
        server.close()
