"""``durable_beat_redact`` in tick messages: Celery's ``argsrepr`` / ``kwargsrepr`` are of the
redacted values (SPEC §2), the body keeps the real ones.

What Flower, task events and worker logs display is the message's ``argsrepr``/``kwargsrepr``;
these tests hold the functions that compute them, and the composition roots that give them the
configured keys. The raw message on a real Redis broker is in
``tests/integration/test_redacted_messages.py``.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

import pytest
from celery import Celery
from kombu import Connection

from celery_durable_beat import DurableBeat
from celery_durable_beat.backends import make_publisher
from celery_durable_beat.celery_message import ReprLimits, send_kwargs, shown_reprs
from celery_durable_beat.clock import SystemClock
from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.message import build_message
from celery_durable_beat.model import Trigger
from celery_durable_beat.publish.celery_publisher import CeleryPublisher
from celery_durable_beat.redact import DEFAULT_KEYS, MASK
from celery_durable_beat.schedules.validate import validate_entries
from celery_durable_beat.settings import Settings
from celery_durable_beat.store.base import Store
from celery_durable_beat.sync import sync_definitions
from celery_durable_beat.wiring import make_beat_loop

pytestmark = pytest.mark.unit

T0 = 1_780_000_000_000
SECRET = "hunter2"
NESTED_KWARGS: dict[str, Any] = {
    "api_password": SECRET,
    "Auth_TOKEN": SECRET,
    "user": "alice",
    "db": {"host": "db1", "SecretKey": SECRET, "ports": [5432, {"apiKey": SECRET}]},
    "items": [{"name": "a", "client_secret": SECRET}, ["t", {"PASSWORD": SECRET}]],
}


def _app(queue: str, **conf: Any) -> Celery:
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update({"durable_beat_url": "sqlite:///never-opened", **conf})
    app.conf.task_default_queue = queue
    return app


def _drain(app: Celery, queue: str) -> list[Any]:
    """The raw messages of ``queue`` on the app's in-memory broker, consumed."""
    found = []
    with Connection(app.conf.broker_url) as conn, conn.SimpleQueue(queue) as q:
        while q.qsize():
            message = q.get(timeout=1)
            found.append(message)
            message.ack()
    return found


def test_kwargsrepr_masks_matching_keys_at_any_depth_in_any_case() -> None:
    deep = ReprLimits(levels=10)  # Celery's default elides below 3 levels: show everything here
    argsrepr, kwargsrepr = shown_reprs(("x",), NESTED_KWARGS, DEFAULT_KEYS, deep)
    assert SECRET not in kwargsrepr
    assert kwargsrepr == repr(
        {
            "api_password": MASK,
            "Auth_TOKEN": MASK,
            "user": "alice",
            "db": {"host": "db1", "SecretKey": MASK, "ports": [5432, {"apiKey": MASK}]},
            "items": [{"name": "a", "client_secret": MASK}, ["t", {"PASSWORD": MASK}]],
        }
    )
    assert argsrepr == "['x']"
    # with Celery's own depth limit, deeper levels are elided as Celery does, never revealed
    shallow = shown_reprs([], NESTED_KWARGS, DEFAULT_KEYS)[1]
    assert SECRET not in shallow and "{...}" in shallow
    assert shown_reprs([], NESTED_KWARGS, [])[1].count(SECRET) == 4  # what Celery shows today


def test_argsrepr_masks_mappings_inside_args() -> None:
    argsrepr, kwargsrepr = shown_reprs(
        [1, {"token": SECRET, "n": 2}, [{"Key": SECRET}]], {}, ["key", "TOKEN"]
    )
    assert argsrepr == "[1, {'token': '***', 'n': 2}, [{'Key': '***'}]]"
    assert kwargsrepr == "{}"


def test_non_matching_keys_and_scalars_are_shown_as_celery_would() -> None:
    args, kwargs = [1, "password", None], {"user": "alice", "count": 3, "when": None}
    assert shown_reprs(args, kwargs, DEFAULT_KEYS) == (repr(args), repr(kwargs))
    # a value equal to a needle is not a key: only keys decide
    assert shown_reprs([], {"note": "my password"}, DEFAULT_KEYS)[1] == "{'note': 'my password'}"


def test_the_configured_keys_replace_the_default() -> None:
    kwargs = {"password": "p", "hostname": "h"}
    assert shown_reprs([], kwargs, ["HOST"])[1] == "{'password': 'p', 'hostname': '***'}"
    assert shown_reprs([], kwargs, [])[1] == repr(kwargs)


def test_reprs_keep_celerys_size_limit() -> None:
    _, kwargsrepr = shown_reprs([], {"blob": "x" * 5000, "token": SECRET}, DEFAULT_KEYS)
    assert len(kwargsrepr) < 1100 and SECRET not in kwargsrepr
    _, short = shown_reprs([], {"blob": "x" * 500}, DEFAULT_KEYS, ReprLimits(kwargs=50))
    assert len(short) < 70


def test_send_kwargs_carry_redacted_reprs_and_the_real_values() -> None:
    [definition] = validate_entries(
        {
            "s": {
                "task": "t",
                "schedule": "@every 1s",
                "args": [{"key": SECRET}],
                "kwargs": NESTED_KWARGS,
            }
        }
    )
    message = build_message("s", definition, T0, tick_task_id("s", T0))
    before = copy.deepcopy(NESTED_KWARGS)
    sent = send_kwargs(message, DEFAULT_KEYS)
    assert SECRET not in sent["argsrepr"] + sent["kwargsrepr"]
    assert sent["args"] == [{"key": SECRET}]
    assert sent["kwargs"] == NESTED_KWARGS == before  # the task gets, and we leave, the real ones
    assert dict(message.kwargs) == before


def test_an_entrys_own_kwargsrepr_is_kept() -> None:
    [definition] = validate_entries(
        {
            "s": {
                "task": "t",
                "schedule": "@every 1s",
                "kwargs": {"token": SECRET},
                "options": {"kwargsrepr": "(hidden)"},
            }
        }
    )
    sent = send_kwargs(build_message("s", definition, T0, "id"), DEFAULT_KEYS)
    assert sent["kwargsrepr"] == "(hidden)"
    assert sent["kwargs"] == {"token": SECRET}


def test_wiring_gives_both_publishers_the_configured_keys(tmp_path: Any) -> None:
    app = _app("q", durable_beat_redact=["hostname"], durable_beat_url=f"sqlite:///{tmp_path}/s.db")
    settings = Settings.from_conf(app.conf, environ={})
    assert make_publisher(app, settings).redact_keys == ("hostname",)
    loop = make_beat_loop(app, settings, SystemClock())
    try:
        beat_publisher = loop.dispatcher.publisher
        assert isinstance(beat_publisher, CeleryPublisher)
        assert beat_publisher.redact_keys == ("hostname",)
    finally:
        loop.store.close()
    control_publisher = DurableBeat(app).publisher  # builds no store
    assert isinstance(control_publisher, CeleryPublisher)
    assert control_publisher.redact_keys == ("hostname",)
    assert CeleryPublisher(app).redact_keys == DEFAULT_KEYS  # built without settings: still safe


def test_a_scheduled_round_publishes_redacted_reprs(store: Store) -> None:
    queue = f"q-{uuid.uuid4().hex}"
    app = _app(queue)
    entries = {
        "s": {"task": "t", "schedule": "@every 1s", "missed": "backfill", "kwargs": NESTED_KWARGS}
    }
    sync_definitions(store, validate_entries(entries), T0)
    publisher = make_publisher(app, Settings.from_conf(app.conf, environ={}))
    Dispatcher(store, publisher).run_round(T0 + 3_000, 1)  # catch-up: several ticks at once
    messages = _drain(app, queue)
    assert len(messages) >= 2
    for message in messages:
        assert message.headers["periodic_task_name"] == "s"
        assert SECRET not in message.headers["kwargsrepr"]
        assert "'api_password': '***'" in message.headers["kwargsrepr"]
        assert message.decode()[1] == NESTED_KWARGS


@pytest.fixture
def leader_epoch() -> int:
    return 1


def test_a_manual_run_publishes_redacted_reprs_with_the_configured_keys(store: Store) -> None:
    queue = f"q-{uuid.uuid4().hex}"
    app = _app(queue, durable_beat_redact=["user"])
    sync_definitions(store, validate_entries({"s": {"task": "t", "schedule": "@every 1h"}}), T0)
    with DurableBeat(app, store=store) as control:
        control.trigger("s", kwargs={"username": "alice", "password": "p"})
    [message] = _drain(app, queue)
    assert message.headers["periodic_trigger"] == Trigger.MANUAL.value
    assert message.headers["periodic_task_name"] == "s"
    assert message.headers["kwargsrepr"] == "{'username': '***', 'password': 'p'}"
    assert message.decode()[1] == {"username": "alice", "password": "p"}


def test_the_default_list_hides_passwd_and_authorization_and_passwords_inside_urls() -> None:
    kwargs = {
        "db_passwd": SECRET,
        "headers": {"Authorization": f"Bearer {SECRET}"},
        "dsn": f"postgresql://user:{SECRET}@db1:5432/app",
        "targets": [f"redis://:{SECRET}@cache:6379/0", "amqp://guest@rabbit//"],
        "note": "mail alice@example.com at https://example.com/a@b",
    }
    _, kwargsrepr = shown_reprs([], kwargs, DEFAULT_KEYS)
    assert SECRET not in kwargsrepr, kwargsrepr
    assert "postgresql://user:***@db1:5432/app" in kwargsrepr
    assert "redis://:***@cache:6379/0" in kwargsrepr and "amqp://guest@rabbit//" in kwargsrepr
    assert "alice@example.com at https://example.com/a@b" in kwargsrepr  # not a password
