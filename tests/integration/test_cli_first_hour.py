"""The first hour of a new user at the shell (issue #11): ``check``, honest ``status``, ``show``.

``celery -A proj durable-beat`` against a real store, as ``test_cli.py`` runs it; the Redis
lease is the real one, taken in this process as a beat would take it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from celery_durable_beat.lease.redis import RedisLease
from celery_durable_beat.model import ScheduleState
from celery_durable_beat.store.sql import SqlStore
from tests.integration.test_cli import Project, make_project, write_project

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

UNREACHABLE = "postgresql+psycopg://postgres:secretpw@127.0.0.1:1/x"
"""A store no command can reach: ``check`` must not need it."""


def test_check_validates_without_the_store(tmp_path: Path) -> None:
    good = {"nightly": {"task": "proj.digest", "schedule": "0 3 * * *"}}
    project = Project(tmp_path, write_project(tmp_path, UNREACHABLE, beat_schedule=good), None)  # type: ignore[arg-type]
    done = project.cli_process("check")  # a process of its own: nothing else on stderr
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        "1 schedules OK\nzone: Europe/Berlin (timezone)\n",  # write_project's app zone
        "",
    )
    bad = {
        "nightly": {"task": "proj.digest", "schedule": "0 3 * * *", "tz": "Bogota"},
        "pulse": {"task": "proj.pulse", "schedule": "@every 1s", "missed": "sometimes"},
    }
    write_project(tmp_path, UNREACHABLE, beat_schedule=bad, durable_beat_lease_ttl=0)
    done = project.cli("check")
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("beat would refuse to start: 3 invalid schedule settings")
    assert 'schedule "nightly": tz "Bogota" is not an IANA zone' in done.stderr
    assert 'schedule "pulse"' in done.stderr and "durable_beat_lease_ttl" in done.stderr
    verdict = json.loads(project.cli("check", "--json").stdout)
    assert (verdict["ok"], len(verdict["problems"])) == (False, 3)


@pytest.fixture
def pg_project(tmp_path: Path, pg_url: str) -> Iterator[Project]:
    nightly = {"nightly-digest": {"task": "proj.digest", "schedule": "0 3 * * *"}}
    yield from make_project(tmp_path, pg_url, beat_schedule=nightly)


def test_read_verbs_answer_on_an_invalid_config_and_warn(pg_project: Project) -> None:
    pg_project.sync_config()
    broken = {"nightly-digest": {"task": "proj.digest", "schedule": "0 3 * * *", "tz": "Mars"}}
    write_project(pg_project.folder, pg_project.store.url, beat_schedule=broken)
    done = pg_project.cli("list", "--json")
    assert done.returncode == 0, done.stderr
    assert [item["name"] for item in json.loads(done.stdout)] == ["nightly-digest"]
    assert done.stderr.startswith("warning: beat would refuse this config")
    assert 'schedule "nightly-digest": tz "Mars"' in done.stderr
    warning, error = pg_project.cli("show", "nope").stderr.splitlines()  # one line each
    assert warning.startswith("warning: ") and error.startswith('Error: no schedule named "nope"')


def test_show_says_overdue_and_redacts(pg_project: Project) -> None:
    beat = pg_project.beat()
    beat.upsert(
        "report",
        {
            "task": "proj.report",
            "schedule": "@every 1h",
            "kwargs": {"api_token": "t-123", "day": "x"},
            "description": "the hourly report",
            "missed": "run_once",
        },
    )
    store, hour = pg_project.store, 3_600_000
    now = store.now_ms()
    stale = (now // hour - 3) * hour  # beat was down for three hours
    store.set_state("report", ScheduleState.ACTIVE, now, next_tick_ms=stale, next_due_ms=stale)
    shown = pg_project.ok_json("show", "report", "--count", "2")
    after = store.now_ms()  # an hour may begin while the CLI runs: bound by the clock on each side
    assert shown["about"] == "the hourly report"
    assert shown["kwargs"] == {"api_token": "***", "day": "x"}
    assert 4 <= shown["overdue"]["missed"] <= 4 + after // hour - now // hour
    assert shown["overdue"]["fires"] == [shown["overdue"]["since"]]  # run_once: the earliest
    before = store.now_ms()
    listed = [t["tick_ms"] for t in pg_project.ok_json("next", "report", "--count", "2")]
    after = store.now_ms()
    hours = range(before // hour, after // hour + 1)
    assert listed in [[(h + 1) * hour, (h + 2) * hour] for h in hours]
    text = pg_project.ok_text("show", "report")
    assert "overdue" in text and "t-123" not in text


@pytest.fixture
def redis_lease_project(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[Project]:
    yield from make_project(tmp_path, pg_url, durable_beat_lease_url=redis_url)


def test_status_reads_the_redis_lease(redis_lease_project: Project, redis_url: str) -> None:
    project = redis_lease_project
    nobody = project.ok_text("status").splitlines()[0]
    assert nobody.split(None, 1)[1].startswith("no leader: no beat holds the lease"), nobody
    assert project.ok_json("status")["leader"] is None
    store: SqlStore = project.store
    lease = RedisLease(redis_url, 30, holder="beat-host:4242", epoch_floor=lambda: 1)
    held = lease.acquire_or_renew()
    assert held.leader
    store.register_epoch(held.epoch)
    try:
        status = project.ok_json("status")
        assert status["leader"] == "beat-host:4242"
        assert status["epoch"] == held.epoch
        assert status["lease_expires_at"] is not None
        assert "beat-host:4242 (lease until " in project.ok_text("status")
        assert lease.acquire_or_renew().epoch == held.epoch  # status took and bumped nothing
    finally:
        lease.release()
        lease.close()
    assert project.ok_json("status")["leader"] is None
