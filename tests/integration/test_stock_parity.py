"""A tick message beside stock beat's for the same entry (SPEC §4, message parity): every header
and property stock beat's message carries is on ours too, with the same value where it does not
name this tick (ids, correlation, delivery tag), plus the ``periodic_*`` headers. Stock beat is
the reference: ``celery.beat.Scheduler.apply_entry`` of Celery itself, on the same app and
broker, read back raw off the broker. Both of beat's publish paths: Redis (templated publishing)
and RabbitMQ (``send_task``, publisher confirms)."""

from __future__ import annotations

import json
import uuid
from typing import Any, ClassVar

import pytest
import redis
from celery import Celery, Task, signals
from celery.beat import ScheduleEntry, Scheduler
from kombu import Connection

from celery_durable_beat.backends import make_publisher
from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.ids import is_tick_id
from celery_durable_beat.schedules.validate import validate_entries
from celery_durable_beat.settings import Settings
from celery_durable_beat.store.memory import MemoryStore
from celery_durable_beat.sync import sync_definitions

pytestmark = pytest.mark.integration

T0 = 1_780_000_000_000
PER_TICK = {"id", "root_id", "correlation_id", "delivery_tag", "reply_to"}
"""Values that name one message (or this process), not the entry: compared by presence only."""


def _app(broker: str, queue: str) -> Celery:
    """An app whose task ``<queue>.report`` is registered (stock beat then calls its
    ``apply_async``); one name per test, as Celery refuses a name taken by another callable."""
    app = Celery("parity", broker=broker, set_as_current=False)
    app.conf.task_default_queue = queue

    @app.task(name=f"{queue}.report")
    def report(region: str, *, detail: int = 0) -> None: ...

    return app


def _ours(app: Celery, task: str) -> None:
    store = MemoryStore(lambda: T0 + 60_000)
    store.register_epoch(1)
    entry = {"task": task, "schedule": 60, "args": ["emea"], "kwargs": {"detail": 2}}
    sync_definitions(store, validate_entries({"Report": entry}), T0)
    publisher = make_publisher(app, Settings.from_conf(app.conf, environ={}))
    stats = Dispatcher(store, publisher).run_round(T0 + 60_000, 1)
    assert [e.outcome.value for e in stats.events] == ["enqueued"]


def _stock(app: Celery, task: str) -> None:
    entry = ScheduleEntry(
        name="Report",
        task=task,
        schedule=60.0,
        args=("emea",),
        kwargs={"detail": 2},
        app=app,
    )
    Scheduler(app, lazy=True).apply_entry(entry)


def _compare(stock: dict[str, Any], ours: dict[str, Any]) -> None:
    for part in ("headers", "properties"):
        missing = set(stock[part]) - set(ours[part])
        assert not missing, f"{part} stock beat carries and the tick lacks: {sorted(missing)}"
        for key in set(stock[part]) - PER_TICK:
            if key in ("argsrepr", "kwargsrepr", "ignore_result", "application_headers"):
                continue  # below: redacted reprs; None vs the task's own False; the headers
            assert ours[part][key] == stock[part][key], f"{part}[{key!r}] differs"
    assert ours["headers"]["celery_beat_task"] is True
    assert ours["headers"]["periodic_schedule"] == "Report"
    # django-celery-beat's scheduler adds this header to stock beat's message (the entry's name;
    # django-celery-results stores it): a tick carries it in the same place.
    assert ours["headers"]["periodic_task_name"] == "Report"
    assert "emea" in ours["headers"]["argsrepr"] and "emea" in stock["headers"]["argsrepr"]
    assert bool(ours["headers"]["ignore_result"]) is bool(stock["headers"]["ignore_result"])
    assert ours["body"] and ours["content-type"] == stock["content-type"]


def test_a_tick_on_redis_carries_what_stock_beats_message_carries(redis_url: str) -> None:
    app = _app(redis_url, "parity-redis")
    client = redis.Redis.from_url(redis_url)
    try:
        _stock(app, "parity-redis.report")
        stock = json.loads(client.lpop("parity-redis"))
        _ours(app, "parity-redis.report")
        ours = json.loads(client.lpop("parity-redis"))
    finally:
        client.close()
        app.close()
    _compare(stock, ours)


def test_a_tick_on_rabbitmq_carries_what_stock_beats_message_carries(amqp_url: str) -> None:
    name = f"parity-amqp-{uuid.uuid4().hex[:8]}"  # a queue of this run's own
    app = _app(amqp_url, name)
    try:
        _stock(app, f"{name}.report")
        _ours(app, f"{name}.report")
        with Connection(amqp_url) as conn:
            queue = conn.SimpleQueue(name)
            stock_msg, ours_msg = queue.get(timeout=10), queue.get(timeout=10)
            raw = [
                {
                    "headers": dict(m.headers),
                    "properties": dict(m.properties),
                    "body": m.body,
                    "content-type": m.content_type,
                }
                for m in (stock_msg, ours_msg)
            ]
            for m in (stock_msg, ours_msg):
                m.ack()
            queue.close()
            conn.default_channel.queue_delete(name)
    finally:
        app.close()
    # Two channels (ours confirms on its own): the order on the queue is not the publish order.
    (stock,) = [m for m in raw if "periodic_schedule" not in m["headers"]]
    (ours,) = [m for m in raw if "periodic_schedule" in m["headers"]]
    _compare(stock, ours)


class TenantTask(Task):  # type: ignore[misc]
    """A base class of the kind SPEC §4 names (tenant headers; celery-once and singletons lock
    here the same way): its ``apply_async`` adds a header and counts the calls."""

    calls: ClassVar[list[str]] = []

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        headers = dict(options.pop("headers", None) or {})
        headers["tenant"] = "acme"
        TenantTask.calls.append(str(options.get("task_id")))
        return super().apply_async(args, kwargs, headers=headers, **options)


@pytest.mark.parametrize("broker", ["redis", "rabbitmq"])
def test_a_task_class_overriding_apply_async_is_called_as_stock_beat_calls_it(
    broker: str, redis_url: str, amqp_url: str
) -> None:
    name = f"tenant-{broker}-{uuid.uuid4().hex[:8]}"
    app = Celery("tenant", broker=redis_url if broker == "redis" else amqp_url)
    app.conf.task_default_queue = name

    @app.task(name=f"{name}.report", base=TenantTask)
    def report(region: str, *, detail: int = 0) -> None: ...

    TenantTask.calls = []
    try:
        _stock(app, f"{name}.report")
        _ours(app, f"{name}.report")
        messages = _drain(app, name, broker, redis_url)
    finally:
        app.close()
    assert len(TenantTask.calls) == 2  # stock beat's call, then the tick's
    assert TenantTask.calls[1] == messages["ours"]["headers"]["id"]  # with the tick's own id
    assert messages["stock"]["headers"]["tenant"] == messages["ours"]["headers"]["tenant"] == "acme"
    assert messages["ours"]["headers"]["periodic_schedule"] == "Report"
    assert messages["ours"]["headers"]["periodic_task_name"] == "Report"


def _drain(app: Celery, queue: str, broker: str, redis_url: str) -> dict[str, dict[str, Any]]:
    """The two messages of ``queue``, raw, as ``stock`` and ``ours``."""
    found: list[dict[str, Any]] = []
    if broker == "redis":
        client = redis.Redis.from_url(redis_url)
        try:
            found = [json.loads(raw) for raw in client.lpop(queue, 2) or []]
        finally:
            client.close()
    else:
        with app.connection_for_read() as conn:
            simple = conn.SimpleQueue(queue)
            for _ in range(2):
                m = simple.get(timeout=10)
                found.append({"headers": dict(m.headers)})
                m.ack()
            simple.close()
            conn.default_channel.queue_delete(queue)
    (stock,) = [m for m in found if "periodic_schedule" not in m["headers"]]
    (ours,) = [m for m in found if "periodic_schedule" in m["headers"]]
    return {"stock": stock, "ours": ours}


@pytest.mark.parametrize("broker", ["redis", "rabbitmq"])
def test_publish_signals_are_sent_once_per_tick_as_stock_beat_sends_them(
    broker: str, redis_url: str, amqp_url: str
) -> None:
    """``before_task_publish``/``after_task_publish`` (SPEC §14): once per tick, with the task's
    name as sender, as for stock beat's message of the same entry. (``beat_init`` and
    ``beat_embedded_init`` are sent by Celery's own ``beat.Service``, which runs either.)"""
    name = f"signals-{broker}-{uuid.uuid4().hex[:8]}"
    app = _app(redis_url if broker == "redis" else amqp_url, name)
    seen: list[tuple[str, str, str]] = []

    def before(sender: str, headers: dict[str, Any], **_: Any) -> None:
        seen.append(("before", sender, str(headers.get("id"))))

    def after(sender: str, headers: dict[str, Any], **_: Any) -> None:
        seen.append(("after", sender, str(headers.get("id"))))

    signals.before_task_publish.connect(before, weak=False)
    signals.after_task_publish.connect(after, weak=False)
    try:
        _stock(app, f"{name}.report")
        stock = list(seen)
        seen.clear()
        _ours(app, f"{name}.report")
        ours = list(seen)
        _drain(app, name, broker, redis_url)
    finally:
        signals.before_task_publish.disconnect(before)
        signals.after_task_publish.disconnect(after)
        app.close()
    assert [(kind, sender) for kind, sender, _ in stock] == [
        ("before", f"{name}.report"),
        ("after", f"{name}.report"),
    ]
    assert [(kind, sender) for kind, sender, _ in ours] == [(k, s) for k, s, _ in stock]
    (task_id,) = {task_id for _, _, task_id in ours}  # both signals of the one tick
    assert task_id.startswith("report@") and is_tick_id(task_id)


class MutatingTask(Task):  # type: ignore[misc]
    """An ``apply_async`` that changes the values it is given, in place, as a careless base
    class may: the tick's values may be the definition's own (``message.build_message``)."""

    seen: ClassVar[list[Any]] = []

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        MutatingTask.seen.append((list(args), {k: list(v) for k, v in kwargs.items()}))
        args.append("added")
        kwargs["regions"].append("added")
        return super().apply_async(args, kwargs, **options)


def test_an_apply_async_that_changes_its_arguments_never_changes_the_next_tick(
    redis_url: str,
) -> None:
    name = f"mutating-{uuid.uuid4().hex[:8]}"
    app = Celery("mutating", broker=redis_url, set_as_current=False)
    app.conf.task_default_queue = name

    @app.task(name=f"{name}.report", base=MutatingTask)
    def report(*args: Any, **kwargs: Any) -> None: ...

    MutatingTask.seen = []
    store = MemoryStore(lambda: T0 + 120_000)
    store.register_epoch(1)
    entry = {"task": f"{name}.report", "schedule": 60, "args": ["a"], "kwargs": {"regions": ["r"]}}
    sync_definitions(store, validate_entries({"Report": entry}), T0)
    publisher = make_publisher(app, Settings.from_conf(app.conf, environ={}))
    try:
        for now in (T0 + 60_000, T0 + 120_000):
            stats = Dispatcher(store, publisher).run_round(now, 1)
            assert [e.outcome.value for e in stats.events] == ["enqueued"]
    finally:
        app.close()
        client = redis.Redis.from_url(redis_url)
        client.delete(name)
        client.close()
    assert MutatingTask.seen == [(["a"], {"regions": ["r"]})] * 2
    assert store.get("Report").definition.kwargs == {"regions": ["r"]}


def test_a_publish_receiver_that_changes_the_body_never_changes_the_next_tick(
    redis_url: str,
) -> None:
    """``before_task_publish`` receivers get the body ``send_task`` built: nested values of the
    tick are copies, never the definition's own."""
    name = f"receiver-{uuid.uuid4().hex[:8]}"
    app = _app(redis_url, name)
    seen: list[Any] = []

    def meddle(body: Any, **_: Any) -> None:
        seen.append(json.loads(json.dumps(body[1])))
        body[1]["cfg"]["sent"] = True

    store = MemoryStore(lambda: T0 + 120_000)
    store.register_epoch(1)
    entry = {"task": f"{name}.report", "schedule": 60, "kwargs": {"cfg": {"n": 1}}}
    sync_definitions(store, validate_entries({"Report": entry}), T0)
    publisher = make_publisher(app, Settings.from_conf(app.conf, environ={}))
    signals.before_task_publish.connect(meddle, weak=False)
    try:
        for now in (T0 + 60_000, T0 + 120_000):
            Dispatcher(store, publisher).run_round(now, 1)
    finally:
        signals.before_task_publish.disconnect(meddle)
        app.close()
        client = redis.Redis.from_url(redis_url)
        client.delete(name)
        client.close()
    assert seen == [{"cfg": {"n": 1}}] * 2
    assert store.get("Report").definition.kwargs == {"cfg": {"n": 1}}
