"""What a user sees when `celery beat -S celery_durable_beat.Scheduler` meets a bad config.

One line that names the setting (never ``schedule "settings"``, never repeated against each
entry that inherits it), then a non-zero exit, with no ``beat raised exception`` traceback from
Celery after our message: real beat processes, because the traceback is Celery's doing.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from celery_durable_beat.model import Action
from tests.support.procs import wait_until
from tests.support.rig import BEAT_ARGS, ProcessRig, rig_factory

pytestmark = pytest.mark.integration

EXIT_INVALID_CONFIG = 2
"""The scheduler's exit status on a bad config (the one `durable-beat check` gives too)."""

ENTRIES = {
    "nightly": {"task": "procapp.record", "schedule": "0 3 * * *"},
    "hourly": {"task": "procapp.record", "schedule": "0 * * * *"},
    "often": {"task": "procapp.record", "schedule": "@every 1s", "args": None},
}


@pytest.fixture
def make_rig(tmp_path: Path, sqlite_url: str, redis_url: str) -> Iterator[Any]:
    rig = partial(ProcessRig, store_url=sqlite_url, broker_url=redis_url, guard=False)
    with rig_factory(tmp_path, rig) as make:
        yield make


@pytest.mark.parametrize(
    ("setting", "line"),
    [
        ({"lease_ttl": -1}, "setting durable_beat_lease_ttl = -1.0: Input should be greater than"),
        ({"timezone": "Mars/Base"}, 'setting timezone "Mars/Base" is not an IANA zone; use e.g.'),
    ],
    ids=["durable_beat_setting", "app_timezone"],
)
def test_a_bad_setting_is_one_line_naming_it_and_a_clean_exit(
    make_rig: Any, setting: dict[str, object], line: str
) -> None:
    beat = make_rig(schedule=ENTRIES, **setting).beat()
    assert beat.wait_exit(60) == EXIT_INVALID_CONFIG, beat.tail()
    out = beat.output()
    said = [text for text in out.splitlines() if "beat refuses to start" in text]
    assert len(said) == 1 and line in said[0], beat.tail()
    for noise in ("beat raised exception", "Traceback", 'schedule "settings"', 'schedule "'):
        assert noise not in out, beat.tail()
    assert [row["action"] for row in beat.actions()] == [Action.BEAT_REFUSED.value]


def test_args_none_is_accepted_like_stock_celery(make_rig: Any) -> None:
    rig = make_rig(schedule={"often": ENTRIES["often"]})
    rig.worker(ready=False)
    beat = rig.beat()
    rows = rig.wait_rows(1, 45)
    assert rows[0]["args"] == [], beat.tail()


def test_an_outdated_schema_is_one_line_naming_migrate_and_a_clean_exit(
    make_rig: Any, sqlite_url: str
) -> None:
    rig = make_rig(schedule=ENTRIES)  # creates the schema
    engine = create_engine(sqlite_url)
    with engine.begin() as conn:  # stamped back to before the first revision: an older release
        conn.execute(text("DELETE FROM durable_beat_alembic_version"))
    engine.dispose()
    beat = rig.beat()
    assert beat.wait_exit(60) == EXIT_INVALID_CONFIG, beat.tail()
    out = beat.output()
    said = [line for line in out.splitlines() if "beat refuses to start" in line]
    assert len(said) == 1 and "durable-beat migrate" in said[0], beat.tail()
    for noise in ("beat raised exception", "Traceback"):
        assert noise not in out, beat.tail()
    assert [row["action"] for row in beat.actions()] == [Action.BEAT_REFUSED.value]


@pytest.mark.parametrize(
    "where",
    ["/proc/durable-beat.sqlite3", "/no/such/folder/beat.sqlite3"],
    ids=["unwritable", "missing"],
)
def test_a_sqlite_store_beat_cannot_write_is_refused_at_start(make_rig: Any, where: str) -> None:
    """It used to start, log "keeps trying" every round and never fire (SPEC §14)."""
    beat = make_rig(schedule=ENTRIES).beat(store_url=f"sqlite:///{where}")
    assert beat.wait_exit(60) == EXIT_INVALID_CONFIG, beat.tail()
    (said,) = [t for t in beat.output().splitlines() if "beat refuses to start" in t]
    # The rig gives the URL as DURABLE_BEAT_URL: the refusal names the variable that set it.
    assert "setting DURABLE_BEAT_URL: the SQLite store cannot be written" in said
    assert "Traceback" not in beat.output()


def test_s_schedule_file_is_ignored_with_one_warning_naming_the_store(
    make_rig: Any, tmp_path: Path
) -> None:
    """Every systemd unit in Celery's docs passes ``-s``; stock beat keeps its shelve there."""
    rig = make_rig(schedule=ENTRIES)
    shelf = tmp_path / "celerybeat-schedule-of-the-unit"
    beat = rig.celery([*BEAT_ARGS, "-s", str(shelf)], "beat")
    # the rig gives the store as DURABLE_BEAT_URL: the store's setting is named as given
    line = beat.wait_for("is ignored: durable beat keeps its schedules in DURABLE_BEAT_URL", 60)
    assert f"-s/--schedule {shelf} (beat_schedule_filename)" in line
    beat.wait_for("leadership gained", 60)
    assert beat.output().count("is ignored: durable beat keeps") == 1
    assert not shelf.exists() and not list(tmp_path.glob(f"{shelf.name}*"))


def test_max_interval_below_the_poll_interval_is_in_force_and_in_the_banner(
    make_rig: Any,
) -> None:
    """Stock beat's banner for the same flag is the reference: the same line. (Celery's
    ``--max-interval`` takes whole seconds; ``beat_max_loop_interval`` any number.)"""
    rig = make_rig(schedule=ENTRIES, poll=5)
    ours = rig.celery([*BEAT_ARGS, "--max-interval", "2"], "beat")
    stock = rig.celery(["beat", "-l", "info", "--pidfile=", "--max-interval", "2"], "stock")
    line = "maxinterval -> 2.00 seconds (2s)"
    ours.wait_for(line, 60)
    stock.wait_for(line, 60)
    default = rig.celery(BEAT_ARGS, "default")  # no flag: durable_beat_poll_interval
    default.wait_for("maxinterval -> 5.00 seconds (5.0s)", 60)


def test_embedded_beat_runs_with_scheduler_given_as_docs_say(make_rig: Any) -> None:
    """``celery worker -B --scheduler celery_durable_beat.Scheduler`` (SPEC §14, embedded
    beat): the durable scheduler leads inside the worker, and the worker runs its ticks."""
    rig = make_rig(schedule={"often": ENTRIES["often"]}, guard=True)
    worker = rig.worker(flags=["-B", "--scheduler", "celery_durable_beat.Scheduler"])
    worker.wait_for("leadership gained", 60)
    enqueued = wait_until(
        lambda: [e for e in rig.history("often") if e.outcome.value == "enqueued"] or None,
        60,
        "a tick the embedded beat enqueued",
    )
    wait_until(lambda: rig.state(enqueued[-1].task_id) is not None, 30, "the worker ran it")
    rig.assert_all_alive()
