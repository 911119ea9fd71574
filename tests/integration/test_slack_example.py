"""The docs' Slack receiver (``examples/monitoring/slack_on_skip.py``) against a local webhook.

Rounds run in this process on the in-memory backends (``FrozenBeat``, or a ``Dispatcher`` with a
gate that holds ticks back the way ``require_worker``'s does); the webhook is a real HTTP server
on 127.0.0.1 that records each POST. The same receiver in a real ``celery beat`` is in
``tests/integration/test_signals_processes.py``.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
from celery import Celery

from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.gates.base import OpenGate
from celery_durable_beat.message import TickMessage
from celery_durable_beat.model import Reason, Source
from celery_durable_beat.publish.capturing import CapturingPublisher
from celery_durable_beat.schedules.validate import validate_entries
from celery_durable_beat.signals import RoundSignals, tick_skipped
from celery_durable_beat.store.base import DueSchedule
from celery_durable_beat.store.memory import MemoryStore
from celery_durable_beat.testing import FrozenBeat
from tests.support.procs import wait_until
from tests.support.webhook import Received, recording_webhook

pytestmark = pytest.mark.integration

T0 = 1_780_000_020_000  # a whole minute, 2026-05-28T20:27:00Z


@pytest.fixture
def slack() -> Iterator[ModuleType]:
    """The example, imported as an app module imports it (which connects its receiver), and
    disconnected after the test: no other test's rounds ever call it."""
    module = importlib.import_module("examples.monitoring.slack_on_skip")
    module.tick_skipped.connect(module.post_skip)  # again: a module is imported only once
    yield module
    tick_skipped.disconnect(module.post_skip)


@pytest.fixture
def webhook(slack: ModuleType, monkeypatch: pytest.MonkeyPatch) -> Iterator[Received]:
    """A local webhook, named to the example by its environment variable."""
    with recording_webhook() as received:
        monkeypatch.setenv(slack.WEBHOOK_ENV, received.url)
        yield received


class Holding(OpenGate):
    """Holds every publish back for ``reason``, as the live-queues gate does with no worker."""

    def __init__(self, reason: Reason) -> None:
        self.reason = reason

    def before_publish(self, due: DueSchedule, message: TickMessage) -> Reason | None:
        return self.reason


class Refusing(CapturingPublisher):
    """A broker that refuses every message for a reason of the schedule's own."""

    def publish(self, message: TickMessage) -> Reason | None:
        return Reason.SERIALIZATION_ERROR


def store_with(**entries: dict[str, Any]) -> MemoryStore:
    store = MemoryStore(clock=lambda: T0)
    store.register_epoch(1)
    for definition in validate_entries(entries):
        store.upsert(definition, Source.CONFIG, T0 + 60_000, T0)
    return store


def dispatch(store: MemoryStore, **dispatcher: Any) -> None:
    Dispatcher(store, CapturingPublisher(), on_recorded=RoundSignals(), **dispatcher).run_round(
        T0 + 60_000, 1
    )


def test_a_no_worker_skip_is_posted_as_json_text(webhook: Received) -> None:
    store = store_with(nightly={"task": "proj.report", "schedule": "@every 60s"})
    dispatch(store, gate=Holding(Reason.NO_WORKER))
    (post,) = wait_until(lambda: list(webhook.posts), 10, "the Slack post")
    assert post["content_type"] == "application/json"
    assert post["path"] == "/services/T000/B000/XXXX"
    assert post["body"] == {
        "text": ":warning: *nightly* skipped its tick of 2026-05-28 20:28:00 UTC: no live worker "
        "consumes its queue (require_worker), so it was not sent"
    }
    print("webhook received:", post["body"])


def test_a_quarantine_is_posted_with_how_to_resume(webhook: Received) -> None:
    store = store_with(export={"task": "proj.export", "schedule": "@every 60s"})
    dispatcher = Dispatcher(store, Refusing(), quarantine_after=1, on_recorded=RoundSignals())
    dispatcher.run_round(T0 + 60_000, 1)
    (text,) = wait_until(webhook.texts, 10, "the Slack post")
    assert text.startswith(":warning: *export* skipped its tick of 2026-05-28 20:28:00 UTC:")
    assert "quarantined" in text and "durable-beat resume export" in text


def test_missed_ticks_while_beat_was_down_are_one_post_with_the_range(
    webhook: Received,
) -> None:
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(
        timezone="UTC", beat_schedule={"pulse": {"task": "proj.pulse", "schedule": 60.0}}
    )
    with FrozenBeat(app, start="2026-03-07T00:00:00Z") as beat:
        beat.advance("1m")
        beat.advance("10m", beat_running=False)  # beat down: ten ticks come due meanwhile
        beat.advance("1s")  # the latest fires, nine are dropped (missed: skip)
    (text,) = wait_until(webhook.texts, 10, "the Slack post")
    assert text == (
        ":warning: *pulse* skipped 9 ticks, 2026-03-07 00:02:00 UTC to 2026-03-07 00:10:00 UTC: "
        "beat was not running then; its missed-run policy dropped it"
    )


def test_skips_by_design_and_an_unset_webhook_post_nothing(
    slack: ModuleType, webhook: Received, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_with(a={"task": "t", "schedule": "@every 60s"})
    dispatch(store, gate=Holding(Reason.OVERLAP))  # overlap: skip is what the user asked for
    monkeypatch.delenv(slack.WEBHOOK_ENV)
    dispatch(store_with(b={"task": "t", "schedule": "@every 60s"}), gate=Holding(Reason.NO_WORKER))
    monkeypatch.setenv(slack.WEBHOOK_ENV, webhook.url)
    dispatch(store_with(c={"task": "t", "schedule": "@every 60s"}), gate=Holding(Reason.NO_WORKER))
    wait_until(webhook.texts, 10, "the one post")
    assert [t.split("*")[1] for t in webhook.texts()] == ["c"]  # only c's, none before it


def test_the_round_does_not_wait_for_slack(
    slack: ModuleType, webhook: Received, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slack is slow: the post is held until the test lets it go, and the round is back first."""
    release, answered = threading.Event(), threading.Event()
    real_post = slack.post

    def held_post(url: str, text: str) -> bool:
        release.wait(30)
        ok = bool(real_post(url, text))
        answered.set()
        return ok

    monkeypatch.setattr(slack, "post", held_post)  # the poster thread calls it by name
    try:
        store = store_with(d={"task": "t", "schedule": "@every 60s"})
        dispatch(store, gate=Holding(Reason.NO_WORKER))
        assert webhook.posts == [] and not answered.is_set()  # the round is back, the post not
    finally:
        release.set()
    wait_until(answered.is_set, 10, "the held post to finish")
    assert len(webhook.texts()) == 1


def test_a_failing_webhook_is_logged_without_its_url(
    slack: ModuleType, webhook: Received, caplog: pytest.LogCaptureFixture
) -> None:
    webhook.status = 500
    with caplog.at_level(logging.WARNING, logger="slack_on_skip"):
        assert slack.post(webhook.url, "hello") is False
    (line,) = [r for r in caplog.records if r.name == "slack_on_skip"]
    assert line.getMessage() == "posting a skip to Slack failed: HTTPError"
    assert webhook.url not in caplog.text and "XXXX" not in caplog.text
    assert slack.post("file:///etc/passwd", "x") is False  # only http(s) is ever opened
