"""``durable_beat_redact`` on a real Redis broker: the raw tick message, read off the queue, has
``argsrepr`` / ``kwargsrepr`` with ``***`` where Flower, task events and worker logs look, and
the real values in its body, where the task looks (SPEC §2). Scheduled, catch-up and manual
ticks, each published by the publisher the composition root builds from the settings.
"""

from __future__ import annotations

import ast
import base64
import json
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

from celery_durable_beat import DurableBeat
from celery_durable_beat.backends import make_publisher
from celery_durable_beat.clock import SystemClock
from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.settings import Settings
from celery_durable_beat.wiring import make_beat_loop
from tests.support.procs import wait_until

pytestmark = pytest.mark.integration

T0 = 1_780_000_000_000
SECRET = "hunter2"
KWARGS: dict[str, Any] = {
    "api_password": SECRET,
    "user": "alice",
    "upstream": {"url": "https://x", "Auth": {"ApiToken": SECRET}},
    "hosts": [{"name": "a", "secret": SECRET}],
}
ARGS = [{"key": SECRET, "n": 1}]
SHOWN_KWARGS = {
    "api_password": "***",
    "user": "alice",
    "upstream": {"url": "https://x", "Auth": {"ApiToken": "***"}},
    "hosts": [{"name": "a", "secret": "***"}],
}
"""What ``kwargsrepr`` reads as (the store may have sorted the keys)."""


@pytest.fixture
def leader_epoch() -> int:
    return 1


def _app(broker: str, store_url: str, **conf: Any) -> Celery:
    app = Celery("proj", broker=broker, set_as_current=False)
    app.conf.update({"durable_beat_url": store_url, "broker_connection_timeout": 1, **conf})
    return app


def _raw_messages(broker: str, queue: str = "celery") -> list[dict[str, Any]]:
    """The messages waiting in ``queue``, as kombu's Redis transport stored them (oldest first)."""
    client = redis.Redis.from_url(broker)
    try:
        return [json.loads(raw) for raw in reversed(client.lrange(queue, 0, -1))]
    finally:
        client.close()


def _body(raw: dict[str, Any]) -> Any:
    assert raw["properties"]["body_encoding"] == "base64"
    return json.loads(base64.b64decode(raw["body"]))


def _assert_redacted_with_real_body(raw: dict[str, Any]) -> None:
    headers = raw["headers"]
    assert SECRET not in headers["argsrepr"] + headers["kwargsrepr"]
    assert SECRET not in json.dumps(headers)
    assert headers["argsrepr"] == "[{'key': '***', 'n': 1}]"
    assert ast.literal_eval(headers["kwargsrepr"]) == SHOWN_KWARGS
    args, kwargs, _embed = _body(raw)
    assert (args, kwargs) == (ARGS, KWARGS)


def test_catch_up_ticks_carry_redacted_reprs(sqlite_url: str, redis_url: str) -> None:
    app = _app(redis_url, sqlite_url)
    entry = {"task": "proj.t", "schedule": "@every 1s", "missed": "backfill", "args": ARGS}
    settings = Settings.from_conf(app.conf, environ={})
    with DurableBeat(app, settings=settings) as control:
        control.upsert("nightly", {**entry, "kwargs": KWARGS})
        store = control.store
        store.register_epoch(1)
        due = store.earliest_due_ms()
        assert due is not None
        stats = Dispatcher(store, make_publisher(app, settings)).run_round(due + 2_500, 1)
    assert stats.outcomes()["enqueued"] == 3  # the due tick and two missed ones
    messages = _raw_messages(redis_url)
    assert len(messages) == 3
    for raw in messages:
        assert raw["headers"]["periodic_trigger"] == "auto"
        _assert_redacted_with_real_body(raw)


def test_a_running_beat_publishes_redacted_reprs(tmp_path: Path, redis_url: str) -> None:
    """Through the composition root, as ``celery beat`` builds it, on the real clock."""
    entry = {"task": "proj.t", "schedule": "@every 1s", "args": ARGS, "kwargs": KWARGS}
    app = _app(redis_url, f"sqlite:///{tmp_path}/beat.db", beat_schedule={"pulse": entry})
    loop = make_beat_loop(app, Settings.from_conf(app.conf, environ={}), SystemClock())

    def a_round_published() -> bool:
        loop.round()
        return bool(_raw_messages(redis_url))

    try:
        loop.prepare()
        wait_until(a_round_published, 10, "the first tick on the broker", interval=0.2)
    finally:
        loop.close()
    raw = _raw_messages(redis_url)[0]
    assert raw["headers"]["periodic_schedule"] == "pulse"
    _assert_redacted_with_real_body(raw)


def test_a_manual_run_carries_reprs_redacted_with_the_configured_keys(
    sqlite_url: str, redis_url: str
) -> None:
    app = _app(redis_url, sqlite_url, durable_beat_redact=["PASSWORD", "dsn"])
    with DurableBeat(app) as control:
        control.upsert("report", {"task": "proj.t", "schedule": "0 3 * * *", "kwargs": KWARGS})
        result = control.trigger("report", kwargs={"db_dsn": "postgresql://u:pw@h/db"})
    [raw] = _raw_messages(redis_url)
    headers = raw["headers"]
    assert headers["id"] == result.task_id and headers["periodic_trigger"] == "manual"
    assert "'api_password': '***'" in headers["kwargsrepr"]
    assert "'db_dsn': '***'" in headers["kwargsrepr"] and "pw@h" not in headers["kwargsrepr"]
    # the configured keys replace the default ones: a "secret" key is shown now
    assert "'secret': 'hunter2'" in headers["kwargsrepr"]
    _args, kwargs, _embed = _body(raw)
    assert kwargs == {**KWARGS, "db_dsn": "postgresql://u:pw@h/db"}
