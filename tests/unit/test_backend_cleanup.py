"""Celery's own housekeeping entry, ``celery.backend_cleanup``, installed as stock beat does.

Stock beat (``celery.beat.Scheduler.install_default_entries``) adds it, daily at 04:00 in the
app's zone, when ``result_expires`` is set and the result backend does not expire results by
itself; database result backends rely on it. Durable beat adds it as a config schedule.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from celery import Celery

from celery_durable_beat.celery_config import definitions_from_app
from celery_durable_beat.model import Definition
from celery_durable_beat.schedules.spec import CronSpec
from celery_durable_beat.settings import Settings
from celery_durable_beat.testing import FrozenBeat

pytestmark = pytest.mark.unit

CLEANUP = "celery.backend_cleanup"


def _app(tmp_path: Path, backend: str | None = "database", **conf: object) -> Celery:
    app = Celery("cleanup", set_as_current=False)
    app.conf.timezone = "Europe/Berlin"
    app.conf.beat_schedule = {"nightly": {"task": "proj.nightly", "schedule": "0 3 * * *"}}
    if backend == "database":
        app.conf.result_backend = f"db+sqlite:///{tmp_path / 'results.sqlite3'}"
    elif backend is not None:
        app.conf.result_backend = backend
    app.conf.update(conf)
    return app


def _by_name(app: Celery) -> dict[str, Definition]:
    settings = Settings.from_conf(app.conf, environ={})
    return {d.name: d for d in definitions_from_app(app, settings)}


def test_a_database_backend_gets_the_cleanup_entry(tmp_path: Path) -> None:
    found = _by_name(_app(tmp_path))
    cleanup = found[CLEANUP]
    assert cleanup.task == CLEANUP
    assert cleanup.spec == CronSpec(("0", "4", "*", "*", "*"), "Europe/Berlin")
    assert dict(cleanup.options) == {"expires": 12 * 3600}
    assert set(found) == {"nightly", CLEANUP}


@pytest.mark.parametrize(
    ("backend", "conf"),
    [
        ("database", {"result_expires": None}),  # results never expire: nothing to clean
        ("redis://127.0.0.1:6379/13", {}),  # Redis expires results itself
        (None, {}),  # no result backend: nothing is stored
    ],
    ids=["result-expires-unset", "self-expiring-backend", "no-backend"],
)
def test_no_cleanup_entry_when_nothing_needs_cleaning(
    tmp_path: Path, backend: str | None, conf: dict[str, object]
) -> None:
    assert set(_by_name(_app(tmp_path, backend, **conf))) == {"nightly"}


def test_the_users_own_entry_of_that_name_wins(tmp_path: Path) -> None:
    app = _app(tmp_path)
    app.conf.beat_schedule = {
        "Celery.Backend_Cleanup": {"task": CLEANUP, "schedule": "0 5 * * *"},
    }
    (only,) = _by_name(app).values()
    assert only.name == "Celery.Backend_Cleanup" and only.spec.fields[1] == "5"  # type: ignore[union-attr]


def test_it_is_listed_and_fires_at_four_in_the_apps_zone(tmp_path: Path) -> None:
    app = _app(tmp_path)
    with FrozenBeat(app, start="2026-07-01T00:00:00Z") as beat:
        row = beat.store.get(CLEANUP)
        assert row is not None and row.source.value == "config"
        assert CLEANUP in {r.name for r in beat.store.list_schedules()}  # what `list` reads
        ticks = [t for t in beat.advance(timedelta(days=2)) if t.schedule == CLEANUP]
    assert [t.tick.isoformat() for t in ticks] == [
        "2026-07-01T02:00:00+00:00",  # 04:00 CEST
        "2026-07-02T02:00:00+00:00",
    ]
    assert all(t.task == CLEANUP for t in ticks)
