"""Wrappers of stock beat's ``apply_entry`` / ``apply_async`` keep working (SPEC §17), on a real
Redis broker, with the real ``celery_durable_beat.Scheduler`` and the round's own dispatcher.

A wrapper of the test's own replaces ``celery.beat.Scheduler.apply_entry`` (as Sentry's
``CeleryIntegration`` does at ``sentry_sdk.init``) and adds a header: the message read back raw
off the broker carries it, with the tick's own id and ``periodic_*`` headers, and the tick is
audited ``enqueued``; on RabbitMQ too, on the round's confirmed channel. Without a wrapper the
round keeps its templated fast path. Sentry and
OpenTelemetry in real beat and worker processes: ``test_observed_ticks.py``.
"""

from __future__ import annotations

import base64
import json
import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis
import wrapt
from celery import Celery, beat
from kombu import Connection
from kombu.exceptions import OperationalError

from celery_durable_beat.dispatch import Dispatcher, RoundStats
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.model import Action
from celery_durable_beat.publish.celery_publisher import CeleryPublisher
from celery_durable_beat.publish.redis_template import TemplatedRedisSession
from celery_durable_beat.publish.send_task import CelerySession
from celery_durable_beat.publish.through_beat import STOCK_SENDING, EntrySession
from celery_durable_beat.scheduler import Scheduler
from celery_durable_beat.schedules.validate import validate_entries
from celery_durable_beat.store.memory import MemoryStore
from celery_durable_beat.sync import sync_definitions

pytestmark = pytest.mark.integration

T0 = 1_780_000_200_000
"""A multiple of 5 minutes (UTC): the schedules below start after it."""
ROUND_AT = T0 + 5 * 60_000 + 1_000
"""Just after their first tick: one tick each is due."""
ENTRIES = {
    "nightly-report": {
        "task": "wrapped.report",
        "schedule": "*/5 * * * *",
        "args": ["emea"],
        "kwargs": {"detail": 2},
        "options": {"headers": {"tenant": "acme"}},
    },
}


class SpyPublisher(CeleryPublisher):
    """The production publisher, remembering each session it opened for the round."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.opened: list[CelerySession] = []

    @contextmanager
    def session(self) -> Iterator[CelerySession]:
        with super().session() as session:
            self.opened.append(session)
            yield session


def report(region: str, *, detail: int = 0) -> None:
    """The schedules' task, registered in beat's app as a user's tasks module would be (one
    callable for every test's app: Celery warns when a name moves to another)."""


@pytest.fixture
def app(redis_url: str) -> Celery:
    app = Celery("wrapped", broker=redis_url, set_as_current=False)
    app.task(name="wrapped.report")(report)
    return app


@pytest.fixture
def broker(redis_url: str) -> Iterator[Any]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def _round(
    app: Celery, entries: dict[str, Any] = ENTRIES, scheduler: Any = "real"
) -> tuple[RoundStats, SpyPublisher]:
    store = MemoryStore(lambda: ROUND_AT)
    store.register_epoch(1)
    sync_definitions(store, validate_entries(entries), T0)
    sched = Scheduler(app, lazy=True) if scheduler == "real" else scheduler
    publisher = SpyPublisher(app, scheduler=sched)
    return Dispatcher(store, publisher).run_round(ROUND_AT, 1), publisher


def _messages(broker: Any) -> list[dict[str, Any]]:
    """The raw kombu envelopes in the default queue, oldest first (LPUSH: newest at 0)."""
    return [json.loads(raw) for raw in reversed(broker.lrange("celery", 0, -1))]


def _body(message: dict[str, Any]) -> Any:
    return json.loads(base64.b64decode(message["body"]))


def test_unwrapped_rounds_keep_the_templated_path(app: Celery, broker: Any) -> None:
    entries = {
        f"s{i}": {"task": "wrapped.report", "schedule": "*/5 * * * *", "args": ["x"]}
        for i in range(5)
    }
    stats, publisher = _round(app, entries)
    assert [e.outcome.value for e in stats.events] == ["enqueued"] * 5
    (session,) = publisher.opened
    assert type(session) is TemplatedRedisSession
    assert (session.sent, session.templated) == (1, 4)  # captured once, then templated


def test_an_own_wrapper_of_apply_entry_adds_a_header_and_keeps_the_tick_id(
    app: Celery, broker: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    stock_apply_entry = beat.Scheduler.apply_entry
    seen: list[Any] = []

    def adds_a_header(self: Any, entry: Any, producer: Any = None) -> None:
        seen.append((self, entry.name, entry.task, entry.schedule, entry.args, entry.kwargs))
        entry.options.setdefault("headers", {})["x-wrapped-by"] = "the test"
        entry.options["task_id"] = "not-the-tick-id"  # ignored: the id is the tick's
        entry.options["time_limit"] = 30  # an option the wrapper adds reaches the message too
        return stock_apply_entry(self, entry, producer=producer)

    monkeypatch.setattr(beat.Scheduler, "apply_entry", adds_a_header)
    caplog.set_level(logging.INFO)
    stats, publisher = _round(app)
    (event,) = stats.events
    assert event.outcome.value == "enqueued"
    assert event.task_id == tick_task_id("nightly-report", event.tick_ms)
    assert type(publisher.opened[0]) is EntrySession
    scheduler, name, task, schedule, args, kwargs = seen[0]
    assert isinstance(scheduler, Scheduler)
    assert (name, task, args, kwargs) == (
        "nightly-report",
        "wrapped.report",
        ("emea",),
        {"detail": 2},
    )
    assert schedule._orig_minute == "*/5" and str(schedule.tz) == "UTC"
    (message,) = _messages(broker)
    headers = message["headers"]
    assert headers["id"] == event.task_id
    assert headers["x-wrapped-by"] == "the test" and headers["tenant"] == "acme"
    assert headers["periodic_schedule"] == "nightly-report"
    assert headers["periodic_tick_ms"] == event.tick_ms
    assert headers["periodic_trigger"] == "auto"
    assert headers["celery_beat_task"] is True
    assert headers["timelimit"] == [30, None]
    assert _body(message)[:2] == [["emea"], {"detail": 2}]
    # One "Sending due task" line per tick, the round's: Celery's own apply_entry's is hidden.
    stock_lines = [r for r in caplog.records if r.msg == STOCK_SENDING]
    ours = [r for r in caplog.records if getattr(r, "action", None) == Action.TICK_SENT.value]
    assert not stock_lines and len(ours) == 1


def test_a_wrapper_of_apply_async_runs_too(
    app: Celery, broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    stock_apply_async = beat.Scheduler.apply_async

    def stamps(self: Any, entry: Any, producer: Any = None, advance: bool = True, **kw: Any) -> Any:
        entry.options.setdefault("headers", {})["x-stamped"] = entry.name
        return stock_apply_async(self, entry, producer=producer, advance=advance, **kw)

    monkeypatch.setattr(beat.Scheduler, "apply_async", stamps)
    stats, publisher = _round(app)
    (event,) = stats.events
    assert event.outcome.value == "enqueued"
    assert type(publisher.opened[0]) is EntrySession
    (message,) = _messages(broker)
    assert message["headers"]["x-stamped"] == "nightly-report"
    assert message["headers"]["id"] == event.task_id
    assert message["headers"]["periodic_tick_ms"] == event.tick_ms


def test_a_wrapt_proxy_like_datadogs_is_routed(
    app: Celery, broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(beat.Scheduler, "apply_entry", beat.Scheduler.__dict__["apply_entry"])
    spans: list[str] = []

    def traced(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        spans.append(f"celery.beat.apply_entry {args[0].name}")
        return wrapped(*args, **kwargs)

    wrapt.wrap_function_wrapper("celery.beat", "Scheduler.apply_entry", traced)
    stats, _ = _round(app)
    assert [e.outcome.value for e in stats.events] == ["enqueued"]
    assert spans == ["celery.beat.apply_entry nightly-report"]
    assert len(_messages(broker)) == 1


@pytest.mark.parametrize(
    ("raised", "reason"),
    [
        (RuntimeError("the wrapper broke"), "publish_error"),
        (TypeError("a bug of the wrapper's"), "publish_error"),  # never the schedule's fault
        (OperationalError(), "broker_unavailable"),
    ],
)
def test_a_wrapper_that_raises_before_publishing_fails_the_tick(
    app: Celery, broker: Any, monkeypatch: pytest.MonkeyPatch, raised: Exception, reason: str
) -> None:
    def refuses(self: Any, entry: Any, producer: Any = None) -> None:
        raise raised

    monkeypatch.setattr(beat.Scheduler, "apply_entry", refuses)
    stats, _ = _round(app)
    assert [(e.outcome.value, e.reason) for e in stats.events] == [("failed", reason)]
    assert _messages(broker) == []


def test_a_wrapper_that_never_publishes_fails_the_tick_for_a_retry(
    app: Celery, broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(beat.Scheduler, "apply_entry", lambda self, entry, producer=None: None)
    stats, _ = _round(app)
    assert [(e.outcome.value, e.reason) for e in stats.events] == [("failed", "publish_error")]


def test_a_wrapper_that_raises_after_publishing_leaves_the_tick_enqueued(
    app: Celery, broker: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    stock_apply_entry = beat.Scheduler.apply_entry

    def then_raises(self: Any, entry: Any, producer: Any = None) -> None:
        stock_apply_entry(self, entry, producer=producer)
        raise RuntimeError("after the fact")

    monkeypatch.setattr(beat.Scheduler, "apply_entry", then_raises)
    stats, _ = _round(app)
    assert [e.outcome.value for e in stats.events] == ["enqueued"]
    assert len(_messages(broker)) == 1
    raised = [r for r in caplog.records if getattr(r, "action", None) == "publish_raised"]
    assert raised and raised[0].levelno == logging.WARNING


def test_a_publisher_without_a_scheduler_never_routes(
    app: Celery, broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Manual runs, backfill and redelivery publish as before: only automatic ticks are the
    scheduler's to route."""
    calls: list[str] = []
    monkeypatch.setattr(
        beat.Scheduler, "apply_entry", lambda self, entry, producer=None: calls.append(entry.name)
    )
    stats, publisher = _round(app, scheduler=None)
    assert [e.outcome.value for e in stats.events] == ["enqueued"]
    assert calls == [] and type(publisher.opened[0]) is TemplatedRedisSession


def test_on_rabbitmq_a_wrapped_tick_is_published_on_the_confirmed_channel(
    amqp_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue_name = f"wrapped-amqp-{uuid.uuid4().hex[:8]}"  # a queue of this run's own
    app = Celery("wrapped", broker=amqp_url, set_as_current=False)
    app.conf.task_default_queue = queue_name
    app.task(name="wrapped.report")(report)
    stock_apply_entry = beat.Scheduler.apply_entry

    def adds_a_header(self: Any, entry: Any, producer: Any = None) -> None:
        entry.options.setdefault("headers", {})["x-wrapped-by"] = "the test"
        return stock_apply_entry(self, entry, producer=producer)

    monkeypatch.setattr(beat.Scheduler, "apply_entry", adds_a_header)
    try:
        stats, publisher = _round(app)
        (event,) = stats.events
        assert event.outcome.value == "enqueued"
        assert type(publisher.opened[0]) is EntrySession
        assert publisher.opened[0].confirms is not None  # publisher confirms, as unwrapped
        with Connection(amqp_url) as conn:
            queue = conn.SimpleQueue(queue_name)
            message = queue.get(timeout=10)
            message.ack()
            queue.close()
            conn.default_channel.queue_delete(queue_name)
    finally:
        app.close()
    assert message.headers["id"] == event.task_id
    assert message.headers["x-wrapped-by"] == "the test"
    assert message.headers["periodic_tick_ms"] == event.tick_ms
