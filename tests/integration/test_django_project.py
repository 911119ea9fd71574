"""A real Django project (SPEC §16): the app's zone is Django's, every verb answers, settings are
named as written.

The project is written in each test's folder by ``tests/support/django_project.py`` the way
docs/django.md builds one: ``TIME_ZONE = "America/New_York"`` and no ``CELERY_TIMEZONE``,
django-celery-results' ``django-db`` result backend, the durable beat settings as
``CELERY_DURABLE_BEAT_*``. Every command runs as a process from that folder (``python -m
celery -A proj …``), so Django is set up there as Celery sets it up, never in this process. A
real beat syncs the config into the store before the read verbs.
"""

from __future__ import annotations

import json
import signal
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from celery_durable_beat.store.sql import SqlStore
from tests.support import django_project
from tests.support.django_project import ENTRIES, ZONE, celery, write_project
from tests.support.procs import CeleryProcess, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

AFTERS = [
    datetime(2026, 1, 10, 12, 0, tzinfo=timezone.utc),  # winter
    datetime(2026, 3, 6, 12, 0, tzinfo=timezone.utc),  # two days before spring forward
    datetime(2026, 10, 30, 12, 0, tzinfo=timezone.utc),  # two days before fall back
]
SCHEDULES = len(ENTRIES) + 1  # and celery.backend_cleanup, as stock beat adds it for django-db
SYNC_TIMEOUT_S = 60


def ok(done: subprocess.CompletedProcess[str]) -> str:
    """The stdout of a command that must exit 0 without a traceback."""
    assert done.returncode == 0, (done.args, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    assert "AppRegistryNotReady" not in done.stderr, done.stderr
    return done.stdout


def sync_with_beat(folder: Path, store_url: str) -> None:
    """Run beat until its config sync stored every schedule, then stop it (SIGTERM, exit 0)."""
    beat = CeleryProcess(
        folder, "proj", ["beat", "-S", "celery_durable_beat.Scheduler", "-l", "info"], {}, "beat"
    )
    store = SqlStore(store_url)
    try:
        wait_until(
            lambda: not beat.alive() or len(store.list_schedules()) == SCHEDULES,
            SYNC_TIMEOUT_S,
            "beat's config sync",
        )
        assert beat.alive(), beat.tail()
        beat.signal(signal.SIGTERM)
        assert beat.wait_exit(30) == 0, beat.tail()
    finally:
        store.close()
        beat.close()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    store_url = f"sqlite:///{tmp_path / 'beat.sqlite3'}"
    folder = write_project(tmp_path, store_url)
    ok(celery(folder, "durable-beat", "migrate"))
    sync_with_beat(folder, store_url)
    return folder


def test_every_verb_answers_on_a_django_project(project: Path) -> None:
    checked = ok(celery(project, "durable-beat", "check")).splitlines()
    assert checked == [f"{SCHEDULES} schedules OK", f"zone: {ZONE} (Django TIME_ZONE)"]
    verdict = json.loads(ok(celery(project, "durable-beat", "check", "--json")))
    assert verdict["zone"] == {"name": ZONE, "source": "Django TIME_ZONE"}
    listed = json.loads(ok(celery(project, "durable-beat", "list", "--json")))
    assert sorted(item["name"] for item in listed) == sorted([*ENTRIES, "celery.backend_cleanup"])
    for name in ENTRIES:
        shown = json.loads(ok(celery(project, "durable-beat", "show", name, "--json")))
        assert shown["tz"] == ZONE, shown
        text = ok(celery(project, "durable-beat", "next", name))
        assert f"TICK ({ZONE})" in text and "T09:00:00-0" in text, text
    assert ok(celery(project, "durable-beat", "migrate")).startswith("schema at revision ")


def test_ticks_are_stock_beats_instant_for_instant(project: Path) -> None:
    """In winter and across both New York DST changes: our CLI's ``next`` (the synced store),
    ``DurableBeat.next_ticks`` and FrozenBeat equal stock beat's own loop on the same app."""
    report = django_project.parity(project, AFTERS)
    for after in AFTERS:
        seen = report[after.isoformat()]
        stock = seen["stock"]
        assert seen["celery_zone"] == ZONE
        for name in ENTRIES:
            assert seen["next_ticks"][name] == stock, (after, name)
            assert seen["frozen"][name] == stock, (after, name)
            cli = ok(
                celery(
                    project, "durable-beat", "next", name, "--after", after.isoformat(), "--json"
                )
            )
            assert [t["tick_ms"] for t in json.loads(cli)[: len(stock)]] == stock, (after, name)
        local = {
            datetime.fromtimestamp(ms / 1000, ZoneInfo(ZONE)).strftime("%H:%M") for ms in stock
        }
        assert local == {"09:00"}
    utc_hours = {
        after.date().isoformat(): [datetime.fromtimestamp(ms / 1000, timezone.utc).hour for ms in r]
        for after, r in ((a, report[a.isoformat()]["stock"]) for a in AFTERS)
    }
    assert utc_hours == {  # 09:00 New York: EST then EDT, EDT then EST
        "2026-01-10": [14, 14, 14, 14],
        "2026-03-06": [14, 14, 13, 13],
        "2026-10-30": [13, 13, 14, 14],
    }


def test_a_bad_setting_is_named_as_written_in_django_settings(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'beat.sqlite3'}"
    folder = write_project(tmp_path, store_url, CELERY_DURABLE_BEAT_LEASE_TTL=-5)
    done = celery(folder, "durable-beat", "check")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "LEASE_TTL" in line]
    assert (
        line.strip()
        == "- setting CELERY_DURABLE_BEAT_LEASE_TTL = -5: Input should be greater than 0"
    )
    assert "durable_beat_lease_ttl" not in done.stderr
    beat = CeleryProcess(
        folder, "proj", ["beat", "-S", "celery_durable_beat.Scheduler"], {}, "refused-beat"
    )
    try:
        assert beat.wait_exit(60) == 2, beat.tail()  # beat refuses as check does
        assert "CELERY_DURABLE_BEAT_LEASE_TTL = -5" in beat.output(), beat.tail()
    finally:
        beat.close()
