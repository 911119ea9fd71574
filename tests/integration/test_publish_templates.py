"""Templated publishing on Redis (``publish/redis_template.py``): a worker cannot tell its
messages from ``send_task``'s.

For each case, one session publishes tick A (``send_task``, captured as the template) and tick B
(rendered from the template) of the same schedule; a second session, templates off, publishes
tick B through ``send_task``. Read raw off the queue, the two B messages are the same bytes but
for kombu's random ``delivery_tag``, and A and B differ only in the per-tick fields. The app's
clock is frozen so the ``expires`` / ``expiration`` both paths compute from it are comparable.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery, signals
from kombu import Exchange, Queue

from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.message import TickMessage, build_message
from celery_durable_beat.model import EXPIRES_NEXT_TICK, Definition, Reason
from celery_durable_beat.publish.celery_publisher import CeleryPublisher
from celery_durable_beat.publish.redis_template import TemplatedRedisSession, templating_refused
from celery_durable_beat.publish.send_task import CelerySession
from celery_durable_beat.schedules.spec import IntervalSpec
from tests.support.faultproxy import FaultProxy
from tests.support.procs import wait_until
from tests.support.rig import ProcessRig, rig_factory

pytestmark = pytest.mark.integration

T0 = 1_780_000_000_000
STEP = 60_000
NOW = datetime(2026, 5, 28, 20, 27, 1, 123456, tzinfo=timezone.utc)
"""The frozen ``app.now()``: after tick A and B, before the next tick (``expires`` next_tick)."""

PER_TICK = {
    "headers.id",
    "headers.root_id",
    "headers.periodic_tick_ms",
    "properties.correlation_id",
    "properties.delivery_tag",
}
"""What differs between two ticks of one schedule whose arguments have no placeholder."""
RENDERED = {
    "body",
    "headers.argsrepr",
    "headers.kwargsrepr",
    "properties.argsrepr",
    "properties.kwargsrepr",
}
NEXT_TICK_EXPIRY = {"headers.expires", "properties.expiration"}

CASES: dict[str, dict[str, Any]] = {
    "default queue": {},
    "queue option": {"options": {"queue": "q2"}, "key": "q2"},
    "task_routes": {"conf": {"task_routes": {"t.*": {"queue": "routed"}}}, "key": "routed"},
    "priority": {"options": {"priority": 5}, "key": "celery\x06\x163"},
    "exchange and routing_key": {
        "options": {"exchange": "ex2", "routing_key": "rk2"},
        "declare": Queue("bound", Exchange("ex2", type="direct"), routing_key="rk2"),
        "key": "bound",
    },
    "pickle serializer": {
        "conf": {"task_serializer": "pickle", "accept_content": ["json", "pickle"]},
    },
    "serializer option": {
        "conf": {"accept_content": ["json", "pickle"]},
        "options": {"serializer": "pickle"},
        "args": (1, "x"),
    },
    "expires seconds": {"expires": 30},
    "expires next tick": {"expires": EXPIRES_NEXT_TICK, "differs": NEXT_TICK_EXPIRY},
    "headers option": {"options": {"headers": {"tenant": "acme", "trace": [1, 2]}}},
    "placeholders and redaction": {
        "args": ("{{scheduled_for_ms}}",),
        "kwargs": {"at": "{{scheduled_for}}", "api_token": "s3cret", "n": 1},
        "differs": RENDERED,
    },
    "time limits and ignore_result": {
        "options": {"time_limit": 30, "soft_time_limit": 20, "ignore_result": True},
    },
    "result backend": {"conf": {"result_backend": "{redis}"}},
}


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def _app(redis_url: str, case: dict[str, Any]) -> Celery:
    app = Celery("tpl", broker=redis_url, set_as_current=False)
    conf = {k: redis_url if v == "{redis}" else v for k, v in case.get("conf", {}).items()}
    app.conf.update(broker_connection_timeout=1, **conf)
    app.now = lambda: NOW.astimezone(app.timezone)  # type: ignore[method-assign]
    if "declare" in case:
        with app.connection_for_write() as conn:
            case["declare"](conn.default_channel).declare()
    return app


def _ticks(case: dict[str, Any]) -> tuple[TickMessage, TickMessage]:
    definition = Definition(
        name="s",
        task="t.tick",
        spec=IntervalSpec(STEP),
        args=case.get("args", ()),
        kwargs=case.get("kwargs", {"n": 1}),
        options=case.get("options", {}),
        expires=case.get("expires"),
    )
    a, b = (
        build_message("s", definition, t, tick_task_id("s", t), next_due_ms=t + STEP)
        for t in (T0, T0 + STEP)
    )
    return a, b


def _queued(client: redis.Redis) -> dict[bytes, list[bytes]]:
    """Every list in the database (the queues, one per priority step), oldest first; emptied."""
    lists = {
        k: client.lrange(k, 0, -1)[::-1] for k in client.scan_iter() if client.type(k) == b"list"
    }
    for key in lists:
        client.delete(key)
    return lists


def _flat(raw: bytes) -> dict[str, Any]:
    message = json.loads(raw)
    flat = {f"headers.{k}": v for k, v in message.pop("headers").items()}
    flat.update({f"properties.{k}": v for k, v in message.pop("properties").items()})
    return {**flat, **message}


@pytest.mark.parametrize("name", list(CASES))
def test_a_templated_tick_is_send_tasks_message(
    name: str, redis_url: str, client: redis.Redis
) -> None:
    case = CASES[name]
    app = _app(redis_url, case)
    a, b = _ticks(case)
    assert templating_refused(app) is None
    with CeleryPublisher(app).session() as session:
        assert isinstance(session, TemplatedRedisSession)
        assert session.publish(a) is None
        assert session.publish(b) is None
        assert session.confirm() is None
    assert (session.sent, session.templated, session.wired) == (1, 1, 1)
    [(key, [raw_a, raw_b])] = _queued(client).items()
    assert key == case.get("key", "celery").encode()

    with CeleryPublisher(app, templates=False).session() as session:
        assert type(session) is CelerySession
        assert session.publish(b) is None
        assert session.confirm() is None
    [(sent_key, [raw_sent])] = _queued(client).items()
    assert sent_key == key

    fast, sent, first = _flat(raw_b), _flat(raw_sent), _flat(raw_a)
    assert fast.keys() == sent.keys() == first.keys()
    differ = {k for k in fast if fast[k] != sent[k]}
    assert differ == {"properties.delivery_tag"}, {k: (fast[k], sent[k]) for k in differ}
    # Byte for byte, key order included, once the random delivery tag is set aside.
    tag = sent["properties.delivery_tag"]
    assert raw_b.replace(fast["properties.delivery_tag"].encode(), tag.encode()) == raw_sent
    assert {k for k in fast if fast[k] != first[k]} == PER_TICK | case.get("differs", set())
    assert fast["headers.id"] == fast["properties.correlation_id"] == b.task_id


def test_written_ticks_keep_their_order_across_queues_and_confirms(
    redis_url: str, client: redis.Redis
) -> None:
    """Ticks written as Redis commands share kombu's pipeline in publish order, and a confirm
    with only such ticks since kombu's last flush still delivers them."""
    app = _app(redis_url, {})
    here = Definition("a", "t.tick", IntervalSpec(STEP))
    there = Definition("b", "t.tick", IntervalSpec(STEP), options={"queue": "q2"})
    ticks = [
        build_message(d.name, d, T0 + i * STEP, tick_task_id(d.name, T0 + i * STEP))
        for i in range(4)
        for d in (here, there)
    ]
    with CeleryPublisher(app).session() as session:
        for tick in ticks[:6]:
            assert session.publish(tick) is None
        assert session.confirm() is None
        assert client.llen("celery") == client.llen("q2") == 3
        for tick in ticks[6:]:
            assert session.publish(tick) is None
        assert session.confirm() is None
    assert (session.sent, session.wired) == (2, 6)
    queued = {key: [json.loads(raw)["headers"]["id"] for raw in raws]
              for key, raws in _queued(client).items()}  # fmt: skip
    assert queued == {
        b"celery": [t.task_id for t in ticks if t.schedule == "a"],
        b"q2": [t.task_id for t in ticks if t.schedule == "b"],
    }


BURST_NAMES = ("alpha", "Ops heartbeat", 'rapport "été" \\ nuit', "beta")
"""Schedules whose ticks share one template key (same task and options): the names only tell
them apart, non-ASCII, quotes and a backslash included (each is JSON-encoded alone)."""


@pytest.mark.parametrize("path", ["redis commands", "kombu channel"])
def test_a_burst_through_one_template_names_each_tick_after_its_own_schedule(
    path: str, redis_url: str, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The template is captured from the first schedule's tick; every other schedule's tick
    must carry its own name in ``periodic_schedule`` and ``periodic_task_name`` (the header
    django-celery-results stores), the one an entry's own ``headers`` set included (replaced,
    as django-celery-beat replaces it), and be the bytes ``send_task`` writes for it."""
    if path == "kombu channel":  # templated, but not written as Redis commands (redis_wire)
        monkeypatch.setattr(TemplatedRedisSession, "_learn_wire", lambda *_: None)
    app = _app(redis_url, {})
    options = {"headers": {"periodic_task_name": "stale", "tenant": "acme"}}
    ticks = [
        build_message(name, Definition(name, "t.tick", IntervalSpec(STEP), options=options),
                      T0 + i * STEP, tick_task_id(name, T0 + i * STEP))
        for i in range(2)
        for name in BURST_NAMES
    ]  # fmt: skip
    with CeleryPublisher(app).session() as session:
        assert isinstance(session, TemplatedRedisSession)
        for tick in ticks:
            assert session.publish(tick) is None
        assert session.confirm() is None
    wired = len(ticks) - 1 if path == "redis commands" else 0
    assert (session.sent, session.templated, session.wired) == (1, len(ticks) - 1, wired)
    [burst] = _queued(client).values()

    with CeleryPublisher(app, templates=False).session() as session:
        for tick in ticks:
            assert session.publish(tick) is None
        assert session.confirm() is None
    [sent] = _queued(client).values()

    for tick, raw, raw_sent in zip(ticks, burst, sent, strict=True):
        headers = json.loads(raw)["headers"]
        assert (headers["id"], headers["periodic_schedule"]) == (tick.task_id, tick.schedule)
        assert headers["periodic_task_name"] == tick.schedule
        assert headers["tenant"] == "acme"
        tag, tag_sent = (json.loads(r)["properties"]["delivery_tag"] for r in (raw, raw_sent))
        assert raw.replace(tag.encode(), tag_sent.encode()) == raw_sent


def test_a_failed_delivery_of_written_ticks_is_uncertain(redis_url: str) -> None:
    """A confirm that only the written ticks' pipeline stands behind reports its failure as
    kombu's own would: broker unavailable, the session failed (so nothing is recorded)."""
    proxy = FaultProxy.for_url(redis_url)
    try:
        app = _app(proxy.url(redis_url), {})
        definition = Definition("a", "t.tick", IntervalSpec(STEP))
        ticks = [
            build_message("a", definition, t, tick_task_id("a", t))
            for t in (T0, T0 + STEP, T0 + 2 * STEP)
        ]
        with CeleryPublisher(app).session() as session:
            assert session.publish(ticks[0]) is None
            assert session.confirm() is None
            for tick in ticks[1:]:
                assert session.publish(tick) is None
            assert session.wired == 2
            proxy.drop()
            assert session.confirm() is Reason.BROKER_UNAVAILABLE
            assert session.failed
    finally:
        proxy.close()


def test_a_publish_signal_receiver_turns_templates_off(redis_url: str, client: redis.Redis) -> None:
    app = _app(redis_url, {})
    seen: list[str] = []

    def receiver(headers: dict[str, Any] | None = None, **_: Any) -> None:
        seen.append((headers or {})["id"])

    signals.before_task_publish.connect(receiver)
    try:
        assert templating_refused(app) == "a publish signal has receivers"
        ticks = [
            build_message("s", Definition("s", "t", IntervalSpec(STEP)), t, f"id-{t}")
            for t in range(3)
        ]
        with CeleryPublisher(app).session() as session:
            assert type(session) is CelerySession
            for tick in ticks:
                assert session.publish(tick) is None
            assert session.confirm() is None
    finally:
        signals.before_task_publish.disconnect(receiver)
    assert seen == [t.task_id for t in ticks]
    assert templating_refused(app) is None


def _router(name: str, args: Any, kwargs: Any, options: Any, **_: Any) -> dict[str, str]:
    return {"queue": "by-args"}


@pytest.mark.parametrize(
    ("conf", "reason"),
    [
        ({"task_always_eager": True}, "task_always_eager"),
        ({"task_send_sent_event": True}, "task_send_sent_event"),
        ({"task_compression": "gzip"}, "task_compression"),
        ({"task_protocol": 1}, "task_protocol is not 2"),
        ({"task_routes": [_router]}, "task_routes has a router function"),
    ],
)
def test_templates_are_refused_where_they_could_differ(
    redis_url: str, conf: dict[str, Any], reason: str
) -> None:
    app = _app(redis_url, {"conf": conf})
    assert templating_refused(app) == reason
    with CeleryPublisher(app).session() as session:
        assert type(session) is CelerySession


def test_an_eta_option_keeps_its_ticks_on_send_task(redis_url: str, client: redis.Redis) -> None:
    app = _app(redis_url, {})
    definition = Definition("s", "t", IntervalSpec(STEP), options={"countdown": 5})
    with CeleryPublisher(app).session() as session:
        for t in (T0, T0 + STEP, T0 + 2 * STEP):
            assert session.publish(build_message("s", definition, t, f"id-{t}")) is None
        assert session.confirm() is None
    assert (session.sent, session.templated) == (3, 0)
    assert client.llen("celery") == 3


@pytest.fixture
def make_rig(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[Any]:
    rig = partial(ProcessRig, store_url=pg_url, broker_url=redis_url)
    with rig_factory(tmp_path, rig) as make:
        yield make


def test_a_worker_runs_templated_ticks(make_rig: Any, redis_url: str) -> None:
    rig = make_rig()
    rig.worker("solo")
    app = Celery("beat-side", broker=redis_url, set_as_current=False)
    definition = Definition(
        "Pulse", "procapp.record", IntervalSpec(STEP), kwargs={"at": "{{scheduled_for_ms}}"}
    )
    ticks = [
        build_message("Pulse", definition, T0 + i * STEP, tick_task_id("Pulse", T0 + i * STEP))
        for i in range(5)
    ]
    with CeleryPublisher(app).session() as session:
        for tick in ticks:
            assert session.publish(tick) is None
        assert session.confirm() is None
    assert (session.sent, session.templated) == (1, 4)
    rows = rig.wait_rows(5, 30, "run")
    ran = sorted((r["id"], r["schedule"], r["tick_ms"], r["kwargs"]["at"]) for r in rows)
    assert ran == [(t.task_id, "Pulse", t.tick_ms, str(t.tick_ms)) for t in ticks]
    wait_until(rig.drained, 10, "queue drained")


@pytest.mark.parametrize("broker", ["memory://", "filesystem://"])
def test_other_transports_always_publish_through_send_task(broker: str, tmp_path: Path) -> None:
    """The demo's ``filesystem://`` broker (and any non-Redis transport) never templates: nothing
    of kombu's Redis transport is even imported for it."""
    app = Celery("plain", broker=broker, set_as_current=False)
    folder = str(tmp_path)
    app.conf.broker_transport_options = {  # every folder under tmp: none in the working copy
        "data_folder_in": folder,
        "data_folder_out": folder,
        "processed_folder": folder,
        "control_folder": folder,
    }
    with CeleryPublisher(app).session() as session:
        assert type(session) is CelerySession
        for tick in (1000, 2000):
            definition = Definition(name="job", task="t.work", spec=IntervalSpec(1000))
            message = build_message("job", definition, tick, f"job@{tick}")
            assert session.publish(message) is None
        assert session.confirm() is None
