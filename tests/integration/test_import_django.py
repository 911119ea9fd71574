"""``import --from django-celery-beat``: tables migrated and filled by Django itself (SPEC §12).

The source is written by django-celery-beat's own migrations and ORM in a child process, on a
SQLite file and on a fresh PostgreSQL database; the import reads it by SQL only. The CLI story
runs ``celery -A proj durable-beat import`` as ``tests/integration/test_cli.py`` runs the CLI.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from celery import Celery

from celery_durable_beat import DurableBeat
from celery_durable_beat.exceptions import ImportSourceError
from celery_durable_beat.importers import import_schedules
from tests.integration.test_cli import run_cli
from tests.support.peers import celery_next_runs, one_off_anchors, store_rows, write_django

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

KIND = "django-celery-beat"
AFTER = datetime(2026, 6, 1, 12, 7, tzinfo=timezone.utc)  # far from any DST change
EXPECTED = {
    "at-sunrise": "created",
    "bad-args": "refused: unreadable: args is not JSON",
    "clocked-once": "created",
    "clocked-past": "created",
    "clocked-ran": "refused: one-shot task already ran: nothing left to run",
    "disabled-hourly": "created",
    "ended": "refused: expired at 2024-01-01T00:00:00+00:00 (expires): nothing left to run",
    "ends-later": "created",
    "every-90s": "created",
    "expired-one-off": "refused: expired at 2024-01-01T00:00:00+00:00 (expires): nothing left",
    "first-monday-berlin": "created",
    "one-off-hourly": "created",
    "one-off-monday": "created",
    "quarter-hour-ny": "created",
    "started-long-ago": "created",
    "starts-later": "created",
}
CREATED = sum(1 for line in EXPECTED.values() if line == "created")
REFUSED = len(EXPECTED) - CREATED


@pytest.fixture(params=["sqlite", "postgresql"])
def django_source(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database holding django-celery-beat's tables and the story's tasks."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/django.sqlite3"
    else:
        url = str(request.getfixturevalue("pg_url"))
    assert write_django(url) == len(EXPECTED)
    return url


@pytest.fixture
def beat(sqlite_url: str) -> Iterator[DurableBeat]:
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(durable_beat_url=sqlite_url, timezone="UTC")
    with DurableBeat(app) as control:
        yield control


def _lines(report_lines: list[str]) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in report_lines[:-1])


def test_every_field_is_mapped_and_every_refusal_says_why(
    django_source: str, beat: DurableBeat, sqlite_url: str
) -> None:
    report = import_schedules(beat, KIND, django_source)
    lines = _lines(report.text())
    assert set(lines) == set(EXPECTED)
    for name, expected in EXPECTED.items():
        assert lines[name].startswith(expected), (name, lines[name])
    assert report.totals() == {
        "created": CREATED,
        "updated": 0,
        "unchanged": 0,
        "refused": REFUSED,
    }

    every = beat.store.get("every-90s")
    assert every is not None
    definition = every.definition
    assert (every.source.value, every.version, every.state.value) == ("api", 1, "active")
    assert definition.task == "proj.report"
    assert beat.get("every-90s").schedule == "@every 90s"
    assert list(definition.args) == [1, "two"]
    assert dict(definition.kwargs) == {"depth": {"max": 3}}
    assert definition.expires == 300  # expire_seconds, as the entry's own expires
    assert dict(definition.options) == {
        "queue": "reports",
        "exchange": "reports-ex",
        "routing_key": "reports.rk",
        "priority": 7,
        "headers": {"tenant": "acme"},
    }
    assert definition.description == "Every ninety seconds"
    assert beat.get("disabled-hourly").state == "paused"
    assert beat.get("started-long-ago").state == "active"
    assert beat.get("starts-later").start_at == "2099-01-01T00:00:00+00:00"
    assert beat.get("starts-later").next_tick == "2099-01-01T00:00:00+00:00"
    assert beat.get("ends-later").end_at == "2099-01-01T00:00:00+00:00"
    sunrise = beat.get("at-sunrise")  # SolarSchedule(sunrise, 52.52, 13.40): SPEC §18's kind
    assert (sunrise.kind, sunrise.schedule) == ("solar", "@solar sunrise 52.52 13.4")

    # nothing replayed: every first tick is after the import
    now_ms = beat.store.now_ms()
    assert all(v.next_tick_ms is None or v.next_tick_ms > now_ms for v in beat.list())

    # crontabs keep their zone and Celery's meaning (day of month AND day of week)
    quarter = beat.get("quarter-hour-ny")
    assert (quarter.tz, quarter.schedule) == ("America/New_York", "*/15 9-17 * * *")
    ours = [t.tick_ms for t in beat.next_ticks("quarter-hour-ny", 5, after=AFTER)]
    fields = {"minute": "*/15", "hour": "9-17"}
    assert ours == celery_next_runs(fields, "America/New_York", AFTER, 5)
    monday = {"minute": "0", "hour": "8", "day_of_month": "1-7", "day_of_week": "1"}
    ours = [t.tick_ms for t in beat.next_ticks("first-monday-berlin", 3, after=AFTER)]
    assert ours == celery_next_runs(monday, "Europe/Berlin", AFTER, 3)
    assert [t.tick[:10] for t in beat.next_ticks("first-monday-berlin", 3, after=AFTER)] == [
        "2026-07-06",
        "2026-08-03",
        "2026-09-07",
    ]

    _one_shots_are_at_schedules(beat, django_source)

    # a second run changes nothing: every carried entry unchanged, the rows untouched
    before = store_rows(sqlite_url)
    again = import_schedules(beat, KIND, django_source)
    assert again.totals() == {
        "created": 0,
        "updated": 0,
        "unchanged": CREATED,
        "refused": REFUSED,
    }
    assert store_rows(sqlite_url) == before


def _one_shots_are_at_schedules(beat: DurableBeat, source: str) -> None:
    """SPEC §15: clocked tasks become @at their instant; one_off interval and crontab tasks @at
    their next occurrence after the task was saved; a clocked instant already past never fires
    and says so once."""
    clocked = beat.get("clocked-once")
    assert (clocked.kind, clocked.schedule) == ("at", "@at 2099-01-01T00:00:00+00:00")
    assert clocked.next_tick == "2099-01-01T00:00:00+00:00"
    assert [t.task_id for t in beat.next_ticks("clocked-once", 3)] == [
        "clocked-once@2099-01-01T00:00:00Z"
    ]
    past = beat.get("clocked-past")
    assert (past.kind, past.next_tick, past.state) == ("at", None, "active")
    (event,) = beat.history("clocked-past").events
    assert (event.outcome, event.reason, event.tick_ms) == ("skipped", "missed", PAST_MS)

    saved = one_off_anchors(source, "django_celery_beat_periodictask")
    hourly = beat.get("one-off-hourly")
    after = int(saved["one-off-hourly"].timestamp() * 1000)
    assert hourly.kind == "at" and hourly.schedule.startswith("@at ")
    assert hourly.next_tick_ms == (after // 3_600_000 + 1) * 3_600_000  # next hour, aligned
    monday = beat.get("one-off-monday")
    fields = {"minute": "0", "hour": "8", "day_of_month": "1-7", "day_of_week": "1"}
    (expected,) = celery_next_runs(fields, "Europe/Berlin", saved["one-off-monday"], 1)
    assert (monday.kind, monday.tz, monday.next_tick_ms) == ("at", "Europe/Berlin", expected)


PAST_MS = int(datetime(2024, 1, 1, tzinfo=timezone.utc).timestamp() * 1000)


def test_dry_run_writes_nothing(django_source: str, beat: DurableBeat, sqlite_url: str) -> None:
    report = import_schedules(beat, KIND, django_source, dry_run=True)
    assert report.totals()["created"] == CREATED
    assert report.text()[-1].startswith(f"dry run, nothing written: {len(EXPECTED)} entries")
    assert beat.list() == []
    import_schedules(beat, KIND, django_source)
    before = store_rows(sqlite_url)
    dry = import_schedules(beat, KIND, django_source, dry_run=True)
    assert dry.totals()["unchanged"] == CREATED
    assert store_rows(sqlite_url) == before


def test_unreachable_or_empty_source_is_one_error_and_writes_nothing(
    beat: DurableBeat, tmp_path: Path
) -> None:
    with pytest.raises(ImportSourceError, match="does not answer"):
        import_schedules(beat, KIND, "postgresql+psycopg://nobody:s3cret@127.0.0.1:1/none")
    empty = tmp_path / "empty.sqlite3"
    with pytest.raises(ImportSourceError, match="holds no django-celery-beat tables"):
        import_schedules(beat, KIND, f"sqlite:///{empty}")
    assert beat.list() == []


APP = """\
from celery import Celery

app = Celery("proj", broker="memory://", set_as_current=False)
app.conf.update(durable_beat_url={url!r}, timezone="UTC")
"""


def test_the_cli_imports_and_fails_in_one_line(tmp_path: Path, sqlite_url: str) -> None:
    source = f"sqlite:///{tmp_path}/django.sqlite3"
    write_django(source)
    (tmp_path / "proj.py").write_text(APP.format(url=sqlite_url))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return run_cli(tmp_path, "proj", "durable-beat", "import", *args)

    dry = cli("--from", KIND, source, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["totals"] == {
        "created": CREATED,
        "updated": 0,
        "unchanged": 0,
        "refused": REFUSED,
    }
    first = cli("--from", KIND, source)
    assert first.returncode == 0, first.stderr
    assert "every-90s: created" in first.stdout.splitlines()
    tail = f"{CREATED} created, 0 updated, 0 unchanged, {REFUSED} refused"
    assert first.stdout.splitlines()[-1].endswith(tail)
    assert "clocked-once: created" in first.stdout.splitlines()
    second = cli("--from", KIND, source, "--json")
    entries = {e["name"]: e for e in json.loads(second.stdout)["entries"]}
    assert {e["status"] for e in entries.values()} == {"unchanged", "refused"}
    assert (entries["at-sunrise"]["status"], entries["at-sunrise"]["reason"]) == ("unchanged", None)

    down = cli("--from", KIND, "postgresql+psycopg://nobody:s3cret@127.0.0.1:1/none")
    assert down.returncode == 7
    assert down.stdout == ""
    assert len(down.stderr.strip().splitlines()) == 1
    assert "does not answer" in down.stderr and "s3cret" not in down.stderr
    empty = cli("--from", KIND, f"sqlite:///{tmp_path}/empty.sqlite3")
    assert empty.returncode == 7
    assert "holds no django-celery-beat tables" in empty.stderr
    unknown = cli("--from", "cron", source)
    assert unknown.returncode == 2
