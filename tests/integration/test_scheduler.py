"""How Celery drives the Scheduler (seen with Celery 5.7), on a real SQLite store."""

from __future__ import annotations

from pathlib import Path

import pytest
from celery import Celery

from celery_durable_beat.exceptions import ConfigError
from celery_durable_beat.scheduler import EXIT_INVALID_CONFIG, Scheduler

pytestmark = pytest.mark.integration


def _app(url: str, schedule: dict[str, dict[str, object]] | None = None) -> Celery:
    app = Celery("sched", broker="memory://", set_as_current=False)
    app.conf.durable_beat_url = url
    app.conf.beat_schedule = schedule or {}
    return app


def test_lazy_instance_touches_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DURABLE_BEAT_URL", raising=False)
    app = _app("postgresql+psycopg://beat:s3cret@127.0.0.1:1/nowhere")
    scheduler = Scheduler(app, lazy=True)  # what `celery beat` builds to print its banner
    assert scheduler.store is None
    assert "s3cret" not in scheduler.info and "127.0.0.1:1/nowhere" in scheduler.info
    scheduler.close()
    scheduler.close()


def test_close_twice_and_burst_of_ticks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DURABLE_BEAT_URL", raising=False)
    app = _app(f"sqlite:///{tmp_path}/s.sqlite3", {"m": {"task": "t", "schedule": "@every 60s"}})
    scheduler = Scheduler(app)
    assert scheduler.store is not None
    calls = {"n": 0}
    real_read = scheduler.store.clock_and_earliest_due

    def counting_read() -> tuple[int, int | None]:
        calls["n"] += 1
        return real_read()

    monkeypatch.setattr(scheduler.store, "clock_and_earliest_due", counting_read)
    first = scheduler.tick()
    after_first = calls["n"]
    assert after_first >= 1
    assert 0 < first <= scheduler.settings.poll_interval
    for _ in range(50):  # Celery's spin just before a due instant
        assert scheduler.tick() > 0
    assert calls["n"] == after_first, "tick() queried the store while nothing could be due"
    scheduler.close()
    scheduler.close()


def test_invalid_config_refuses_to_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DURABLE_BEAT_URL", raising=False)
    app = _app(f"sqlite:///{tmp_path}/s.sqlite3", {"x": {"task": "t", "schedule": "nope"}})
    with pytest.raises(SystemExit) as refused:  # Celery would bury a ConfigError in a traceback
        Scheduler(app)
    assert refused.value.code == EXIT_INVALID_CONFIG
    assert isinstance(refused.value.__cause__, ConfigError)
    assert 'schedule "x"' in str(refused.value.__cause__)


def test_wrong_setting_names_itself(tmp_path: Path) -> None:
    app = _app(f"sqlite:///{tmp_path}/s.sqlite3")
    app.conf.durable_beat_batch_size = 0
    banner = Scheduler(app, lazy=True)  # the banner's instance: built before logging is set up
    assert "invalid" in banner.info
    with pytest.raises(SystemExit) as refused:
        Scheduler(app)
    assert refused.value.code == EXIT_INVALID_CONFIG
    assert "durable_beat_batch_size" in str(refused.value.__cause__)


def test_history_is_pruned_to_history_keep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from celery_durable_beat.model import Outcome, Trigger
    from celery_durable_beat.store.base import AuditEvent

    monkeypatch.delenv("DURABLE_BEAT_URL", raising=False)
    app = _app(f"sqlite:///{tmp_path}/s.sqlite3", {"p": {"task": "t", "schedule": "@every:200"}})
    app.conf.durable_beat_history_keep = 3
    scheduler = Scheduler(app)
    store = scheduler.store
    assert store is not None
    old = [
        AuditEvent("p", 1000 + i, f"old-{i}", Trigger.AUTO, Outcome.ENQUEUED, version=1)
        for i in range(10)
    ]
    store.settle(old, (), epoch=1)
    deadline = store.now_ms() + 10_000
    while not any(e.task_id and e.task_id.startswith("p@") for e in store.history("p", 50)):
        assert store.now_ms() < deadline, "no tick was dispatched"
        scheduler._wake_at = 0.0  # let the test's loop drive rounds back to back
        scheduler.tick()
    events = store.history("p", 50)
    assert len(events) == 3  # the newest three of everything recorded: the tick, then old-9...
    kept_old = [e.task_id for e in events if e.task_id and e.task_id.startswith("old-")]
    assert kept_old == ["old-9", "old-8"][: len(kept_old)]
    scheduler.close()
