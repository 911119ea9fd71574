"""The Celery publisher against a real RabbitMQ: ``enqueued`` only for what the broker acked.

A queue that holds one message and refuses the rest (``x-max-length: 1``,
``x-overflow: reject-publish``) makes RabbitMQ nack publishes after it has received their frames:
without publisher confirms the round cannot tell, records them ``enqueued`` and advances, and
the ticks are lost.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from celery import Celery
from kombu import Connection, Queue

from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.message import build_message
from celery_durable_beat.model import Definition, Reason
from celery_durable_beat.publish.celery_publisher import CeleryPublisher
from celery_durable_beat.schedules.spec import IntervalSpec
from celery_durable_beat.schedules.validate import validate_entries
from celery_durable_beat.store.sql import SqlStore
from celery_durable_beat.sync import sync_definitions

pytestmark = pytest.mark.integration
T0 = 1_780_000_000_000
ONE_ONLY = {"x-max-length": 1, "x-overflow": "reject-publish"}


@pytest.fixture
def leader_epoch() -> int:
    return 1


@pytest.fixture
def queue(amqp_url: str) -> Iterator[Queue]:
    """A queue of this test's own that takes one message and refuses the others."""
    q = Queue(f"confirm-{uuid.uuid4().hex[:8]}", queue_arguments=ONE_ONLY, durable=False)
    yield q
    with Connection(amqp_url) as conn:
        q(conn.default_channel).delete()


def _app(amqp_url: str, queue: Queue) -> Celery:
    app = Celery("pub-amqp", broker=amqp_url, set_as_current=False)
    app.conf.task_queues = [queue]
    app.conf.task_default_queue = queue.name
    app.conf.broker_connection_timeout = 2
    return app


def _queued_ids(amqp_url: str, queue: Queue) -> list[str]:
    ids = []
    with Connection(amqp_url) as conn:
        bound = queue(conn.default_channel)
        while (message := bound.get(no_ack=True)) is not None:
            ids.append(message.headers["id"])
    return ids


def test_a_publish_the_broker_refuses_is_not_confirmed(amqp_url: str, queue: Queue) -> None:
    app = _app(amqp_url, queue)
    definition = Definition(name="s", task="t", spec=IntervalSpec(1000))
    first, second = (
        build_message("s", definition, T0 + i, tick_task_id("s", T0 + i)) for i in (0, 1000)
    )
    with CeleryPublisher(app).session() as session:
        assert session.publish(first) is None
        assert session.confirm() is None  # the queue had room for this one
        assert session.publish(second) is None  # the frame went out...
        assert session.confirm() is Reason.BROKER_UNAVAILABLE  # ...and the broker refused it
    assert _queued_ids(amqp_url, queue) == [first.task_id]
    app.close()


def test_a_round_records_enqueued_only_what_the_broker_has(
    pg_store: SqlStore, amqp_url: str, queue: Queue
) -> None:
    entries = {f"s{i}": {"task": "t", "schedule": "@every 1s"} for i in range(3)}
    sync_definitions(pg_store, validate_entries(entries), T0)
    app = _app(amqp_url, queue)
    dispatcher = Dispatcher(pg_store, CeleryPublisher(app))
    stats = dispatcher.run_round(T0 + 1000, 1)
    queued = set(_queued_ids(amqp_url, queue))
    enqueued = {
        e.task_id
        for name in entries
        for e in pg_store.history(name, 10)
        if e.outcome.value == "enqueued"
    }
    assert len(queued) == 1  # the broker took one of the three and refused two
    assert enqueued <= queued, f"recorded enqueued but not on the broker: {enqueued - queued}"
    assert stats.broker_unavailable
    # the whole uncertain batch is recorded failed, so the next round sends those ticks again
    for name in entries:
        assert [(e.outcome.value, e.reason) for e in pg_store.history(name, 10)] == [
            ("failed", "broker_unavailable")
        ]
    app.close()
