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
from tests.support.rig import ProcessRig, rig_factory

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
