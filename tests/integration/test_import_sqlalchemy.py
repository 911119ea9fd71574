"""``import --from sqlalchemy-celery-beat``: tables created and filled by its own models.

On SQLite (no schema) and on PostgreSQL with ``beat_schema`` set, so the reader has to find
the tables outside the default schema.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from celery import Celery

from celery_durable_beat import DurableBeat
from celery_durable_beat.importers import import_schedules
from tests.support.peers import celery_next_runs, one_off_anchors, store_rows, write_sqlalchemy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

KIND = "sqlalchemy-celery-beat"
AFTER = datetime(2026, 6, 1, 12, 7, tzinfo=timezone.utc)
EXPECTED = {
    "at-sunrise": "created",
    "clocked-once": "created",
    "disabled-hourly": "created",
    "every-90s": "created",
    "expired-one-off": "refused: expired at 2024-01-01T00:00:00+00:00 (expires)",
    "first-monday-berlin": "created",
    "one-off-hourly": "created",
    "quarter-hour-ktm": "created",
}


@pytest.fixture(params=["sqlite", "postgresql"])
def source(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/schedule.db"
        assert write_sqlalchemy(url) == len(EXPECTED)
    else:
        url = str(request.getfixturevalue("pg_url"))
        assert write_sqlalchemy(url, schema="beat_tables") == len(EXPECTED)
    return url


@pytest.fixture
def beat(sqlite_url: str) -> Iterator[DurableBeat]:
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(durable_beat_url=sqlite_url, timezone="UTC")
    with DurableBeat(app) as control:
        yield control


def test_import_maps_refuses_and_is_idempotent(
    source: str, beat: DurableBeat, sqlite_url: str
) -> None:
    dry = import_schedules(beat, KIND, source, dry_run=True)
    assert dry.totals()["created"] == 7
    assert beat.list() == []

    report = import_schedules(beat, KIND, source)
    lines = dict(line.split(": ", 1) for line in report.text()[:-1])
    assert set(lines) == set(EXPECTED)
    for name, expected in EXPECTED.items():
        assert lines[name].startswith(expected), (name, lines[name])

    every = beat.store.get("every-90s")
    assert every is not None
    assert every.definition.task == "proj.report"
    assert beat.get("every-90s").schedule == "@every 90s"
    assert list(every.definition.args) == [1, "two"]
    assert dict(every.definition.kwargs) == {"depth": {"max": 3}}
    assert every.definition.expires == 300  # expire_seconds, as the entry's own expires
    assert dict(every.definition.options) == {
        "queue": "reports",
        "exchange": "reports-ex",
        "routing_key": "reports.rk",
        "priority": 7,
        "headers": {"tenant": "acme"},
    }
    assert every.definition.description == "Every ninety seconds"
    assert beat.get("disabled-hourly").state == "paused"
    sunrise = beat.get("at-sunrise")  # SolarSchedule(sunrise, 52.52, 13.40): SPEC §18's kind
    assert (sunrise.kind, sunrise.schedule) == ("solar", "@solar sunrise 52.52 13.4")

    ktm = beat.get("quarter-hour-ktm")
    assert (ktm.tz, ktm.schedule) == ("Asia/Kathmandu", "*/15 9-17 * * *")
    ours = [t.tick_ms for t in beat.next_ticks("quarter-hour-ktm", 6, after=AFTER)]
    assert ours == celery_next_runs({"minute": "*/15", "hour": "9-17"}, "Asia/Kathmandu", AFTER, 6)
    monday = {"minute": "0", "hour": "8", "day_of_month": "1-7", "day_of_week": "1"}
    ours = [t.tick_ms for t in beat.next_ticks("first-monday-berlin", 3, after=AFTER)]
    assert ours == celery_next_runs(monday, "Europe/Berlin", AFTER, 3)

    # SPEC §15: the clocked task is @at its instant, the one_off interval @at its next
    # occurrence after the task was saved (sqlalchemy-celery-beat's own date_changed)
    clocked = beat.get("clocked-once")
    assert (clocked.kind, clocked.next_tick) == ("at", "2099-01-01T00:00:00+00:00")
    saved = one_off_anchors(source, "celery_periodictask")["one-off-hourly"]
    after = int(saved.timestamp() * 1000)
    hourly = beat.get("one-off-hourly")
    assert hourly.kind == "at"
    assert hourly.next_tick_ms == (after // 3_600_000 + 1) * 3_600_000

    before = store_rows(sqlite_url)
    again = import_schedules(beat, KIND, source)
    assert again.totals() == {"created": 0, "updated": 0, "unchanged": 7, "refused": 1}
    assert store_rows(sqlite_url) == before
