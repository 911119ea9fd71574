"""The enqueue hooks (SPEC §17) from real ``celery beat`` processes.

The test app connects a receiver of both signals the way a user's app module would
(``tests/support/hook_log.py``, loaded by ``procapp`` when ``HOOKS_FILE`` is set): each signal the
beat sends is one JSON line. Beat runs on PostgreSQL and a Redis broker, a worker (with
``install(app)``) where the scenario has one. Each hook is checked against the audit record it
announces: the same tick, task id and reason, the record already committed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from celery_durable_beat.model import Outcome
from celery_durable_beat.store.sql import SqlStore
from tests.support.procs import read_jsonl, wait_until
from tests.support.rig import ProcessRig, rig_factory
from tests.support.webhook import recording_webhook

pytestmark = pytest.mark.integration

SCHEDULER = "celery_durable_beat.scheduler.Scheduler"
"""The ``sender`` of every hook a beat process sends, as the receiver names it."""


@pytest.fixture
def make_rig(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[Any]:
    """Rigs whose processes write the hooks they send to ``hooks.jsonl`` in their folder."""

    def make(workdir: Path, **settings: Any) -> ProcessRig:
        hooks = workdir / "hooks.jsonl"
        return ProcessRig(workdir, pg_url, redis_url, hooks_file=hooks, lease_ttl=3, **settings)

    with rig_factory(tmp_path, make) as made:
        yield made


def hooks(rig: ProcessRig, signal: str, schedule: str) -> list[dict[str, Any]]:
    rows = read_jsonl(Path(rig.env["HOOKS_FILE"]))
    return [r for r in rows if r["signal"] == signal and r["schedule"] == schedule]


def wait_hooks(
    rig: ProcessRig, signal: str, schedule: str, timeout: float, at_least: int = 1, **match: Any
) -> list[dict[str, Any]]:
    """Until the beat sent ``signal`` for ``schedule`` (with the ``match`` fields) ``at_least``
    times; those rows."""

    def found() -> list[dict[str, Any]]:
        rows = hooks(rig, signal, schedule)
        rows = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
        return rows if len(rows) >= at_least else []

    return wait_until(found, timeout, f"{signal} of {schedule} {match or ''}")


def test_real_ticks_are_announced_enqueued_by_the_scheduler(make_rig: Any) -> None:
    rig = make_rig()
    rig.worker("solo")
    rig.beat(schedule={"pulse": {"task": "procapp.record", "schedule": "@every 1s"}})
    sent = wait_hooks(rig, "tick_enqueued", "pulse", 30, at_least=3)
    recorded = {e.task_id: e for e in rig.history("pulse") if e.outcome is Outcome.ENQUEUED}
    for row in sent:
        assert (row["sender"], row["trigger"]) == (SCHEDULER, "auto")
        assert row["tick_is_aware_utc"], row  # an aware UTC datetime in the receiver
        event = recorded[row["task_id"]]  # the record the hook announced
        assert event.tick_ms == row["tick_ms"] and row["tick"].endswith("+00:00")
    ticks = [row["tick_ms"] for row in sent]
    assert ticks == sorted(set(ticks))  # each tick once, in order
    ran = wait_until(
        lambda: {r["id"] for r in rig.rows("run")} >= {r["task_id"] for r in sent} or None,
        30,
        "the announced ticks run",
    )
    assert ran
    rig.assert_all_alive()


def test_a_require_worker_schedule_with_no_worker_is_announced_and_posted(
    make_rig: Any,
) -> None:
    """No worker at all: ``no_worker`` skips, each announced; the docs' Slack example, connected
    in the same beat, posts each to a webhook."""
    with recording_webhook() as webhook:
        rig = make_rig(slack_webhook=webhook.url)
        guarded = {"task": "procapp.record", "schedule": "@every 1s", "require_worker": True}
        beat = rig.beat(schedule={"guarded": guarded})
        (first, *_) = wait_hooks(rig, "tick_skipped", "guarded", 30, reason="no_worker")
        assert first["sender"] == SCHEDULER and first["count"] == 1
        assert first["task_id"] and first["task_id"].startswith("guarded@")
        texts = wait_until(webhook.texts, 30, "the Slack post from beat")
        print("webhook received from beat:", texts[0])
        assert texts[0].startswith(":warning: *guarded* skipped its tick of ")
        assert "no live worker consumes its queue" in texts[0]
    skipped = {(e.tick_ms, e.reason) for e in rig.history("guarded")}
    assert (first["tick_ms"], "no_worker") in skipped
    assert hooks(rig, "tick_enqueued", "guarded") == []
    assert beat.alive(), beat.tail()


def test_a_schedule_no_worker_knows_is_announced_quarantined(make_rig: Any) -> None:
    rig = make_rig(quarantine_after=2)
    rig.worker("solo")  # records each tick unknown_task: two in a row quarantine the schedule
    rig.beat(schedule={"misspelt": {"task": "procapp.no_such_task", "schedule": "@every 1s"}})
    (row,) = wait_hooks(rig, "tick_skipped", "misspelt", 60, reason="quarantined")
    assert (row["sender"], row["trigger"], row["task_id"]) == (SCHEDULER, "auto", None)
    newest = rig.history("misspelt")[0]
    assert (newest.outcome, newest.reason, newest.tick_ms) == (
        Outcome.SKIPPED,
        "quarantined",
        row["tick_ms"],
    )
    enqueued = hooks(rig, "tick_enqueued", "misspelt")
    assert len(enqueued) >= 2  # the ticks that went out before, each announced
    rig.assert_all_alive()


def test_ticks_missed_while_beat_was_down_are_announced_missed(make_rig: Any) -> None:
    rig = make_rig()
    schedule = {"pulse": {"task": "procapp.record", "schedule": "@every 1s", "missed": "skip"}}
    first = rig.beat("first", schedule=schedule)
    wait_hooks(rig, "tick_enqueued", "pulse", 30)
    assert first.stop() == 0  # SIGTERM: the round in flight ends, the lease is released
    store = SqlStore(rig.store_url)
    try:
        down_at = store.now_ms()
        # Beat stays down over at least two ticks, by the store's clock (the leader's clock).
        wait_until(lambda: store.now_ms() >= down_at + 2_500, 10, "2.5 s with beat down")
    finally:
        store.close()
    second = rig.beat("second", schedule=schedule)
    (row, *_) = wait_hooks(rig, "tick_skipped", "pulse", 30, reason="missed")
    assert row["sender"] == SCHEDULER and row["count"] >= 1 and row["task_id"] is None
    assert row["last_tick"] >= row["tick"]
    (record,) = [e for e in rig.history("pulse") if e.reason == "missed"]
    assert (record.tick_ms, record.detail["count"]) == (row["tick_ms"], row["count"])
    after = [r["tick_ms"] for r in hooks(rig, "tick_enqueued", "pulse") if r["pid"] == row["pid"]]
    assert after and max(after) > row["tick_ms"]  # beat went on: the latest due tick fired
    assert second.alive(), second.tail()
