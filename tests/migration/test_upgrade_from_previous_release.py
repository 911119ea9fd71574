"""A store made by the previous release upgrades to namespaces keeping everything in it (SPEC §16).

SPEC §16: "The default namespace (setting unset) keeps today's ids, keys and rows, and a store made
before namespaces upgrades with ``migrate`` keeping everything in it." The other migration tests
write a few rows by hand at an older revision; these let the release before namespaces make the
store itself. Its package (commit ``d14abd6``, schema revision 0005) is extracted with
``git archive`` and runs in a process of its own (``tests/support/previous_release.py`` says what it
does there: config sync, beat's rounds, a worker's run rows, an operator's changes, the store
lease held) and dumps every table with plain SQL, with what its public API showed. Then this
process, the new code, upgrades the store with ``celery -A proj durable-beat migrate`` and reads it:
every row is still there with the same values (plus ``namespace = ''``, and ``config_app`` NULL),
the schema is the declared one, ``DurableBeat(app)`` without ``durable_beat_namespace`` shows
exactly what the old release showed, and the next round continues the schedules where the old
release left them, sending none of the ticks it had recorded.

On SQLite and on PostgreSQL (``store_url``). Without git or the commit the tests fail naming the
commit: they never skip.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from celery import Celery
from sqlalchemy import create_engine

from celery_durable_beat import DurableBeat
from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.exceptions import SchemaOutdated
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.lease.sql import StoreLease
from celery_durable_beat.publish.capturing import CapturingPublisher
from celery_durable_beat.scheduler import EXIT_INVALID_CONFIG
from celery_durable_beat.settings import Settings
from celery_durable_beat.store.sql import SqlStore
from celery_durable_beat.store.tables import VERSION_TABLE, metadata
from tests.support.previous_release import (
    HOUR_MS,
    LEASE_TTL_S,
    MINUTE_MS,
    NAMES,
    dump_tables,
)

pytestmark = [pytest.mark.migration, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
PREVIOUS_RELEASE = "d14abd6"
"""The last commit before namespaces: schema revision 0005, one fence row, no namespace column."""
SCRIPT = REPO / "tests" / "support" / "previous_release.py"
PROCESS_TIMEOUT_S = 120
PROJECT_MODULE = """\
from celery import Celery

T0_MS = {t0!r}
CONF = {conf!r}

app = Celery("proj", broker="memory://", set_as_current=False)
app.conf.update(CONF)
"""
UNDER_TEST_ENV = ("DURABLE_BEAT_URL", "DURABLE_BEAT_API_TOKENS", "DURABLE_BEAT_NAMESPACE")
"""Unset in both processes: the project's settings are the ones under test."""

NEW_TABLES = {
    "durable_beat_alembic_version": "version_num",
    "durable_beat_schedules": "id",
    "durable_beat_audit": "id",
    "durable_beat_fence": "namespace",
    "durable_beat_runs": "task_id",
    "durable_beat_workers": "hostname",
    "durable_beat_actions": "id",
}
"""The same tables at 0006, each in the order the old dump has (the fence is keyed anew)."""
ADDED = {
    "durable_beat_schedules": {"namespace": "", "config_app": None},
    "durable_beat_audit": {"namespace": ""},
    "durable_beat_fence": {"namespace": ""},
    "durable_beat_runs": {"namespace": ""},
    "durable_beat_workers": {"namespace": ""},
    "durable_beat_actions": {"namespace": ""},
    "durable_beat_alembic_version": {},
}
"""What 0006 adds to each row: the default namespace, and no config app yet."""
REMOVED = {"durable_beat_fence": {"id"}}
AUDIT_AND_FENCE = ("durable_beat_audit", "durable_beat_fence")
"""What 0006 takes from each row: the fence's single-row key (``id = 1``)."""


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def project_conf(url: str, t0: int) -> dict[str, Any]:
    """The project's settings: two config schedules that end at ``T0 + 3 h`` (so what is overdue
    is the same whenever the test reads it), live workers for a day."""
    end = _iso(t0 + 3 * HOUR_MS)
    return {
        "timezone": "UTC",
        "durable_beat_url": url,
        "durable_beat_worker_ttl": 86400,
        "beat_schedule": {
            "report": {
                "task": "proj.report",
                "schedule": "@every 10m",
                "kwargs": {"for": "{{scheduled_for}}", "v": 2},
                "missed": "backfill",
                "backfill_max": 10,
                "end_at": end,
                "description": "the ten-minute report",
            },
            "Nightly Cleanup": {
                "task": "proj.cleanup",
                "schedule": "*/15 * * * *",
                "tz": "America/New_York",
                "args": [1, "two"],
                "missed": "skip",
                "end_at": end,
                "options": {"queue": "maintenance"},
                "expires": 300,
            },
        },
    }


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's package, extracted from git: a folder to put on PYTHONPATH."""
    where = tmp_path_factory.mktemp("prev")
    command = ["git", "-C", str(REPO), "archive", "--format=tar", PREVIOUS_RELEASE]
    try:
        done = subprocess.run(
            [*command, "celery_durable_beat"],
            capture_output=True,
            timeout=PROCESS_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError:
        pytest.fail(f"git is not installed: the previous release ({PREVIOUS_RELEASE}) is needed")
    if done.returncode != 0:
        pytest.fail(
            f"the previous release, commit {PREVIOUS_RELEASE}, cannot be read from {REPO}: "
            f"{done.stderr.decode(errors='replace').strip()}"
        )
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as archive:
        archive.extractall(where, filter="data")
    return where


@dataclass
class Made:
    """A store the previous release made, and what it said of it."""

    url: str
    project: Path
    conf: dict[str, Any]
    t0: int
    dump: dict[str, Any]

    @property
    def tables(self) -> dict[str, list[dict[str, Any]]]:
        return dict(self.dump["tables"])

    def app(self) -> Celery:
        """The same project in this process (the new code), default namespace."""
        app = Celery("proj", broker="memory://", set_as_current=False)
        app.conf.update(self.conf)
        return app


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in UNDER_TEST_ENV}
    env.pop("PYTHONPATH", None)
    return {**env, **extra}


@pytest.fixture
def made(store_url: str, previous_release: Path, tmp_path: Path) -> Made:
    """A fresh store filled by the previous release (``tests/support/previous_release.py``)."""
    now = int(time.time() * 1000)
    t0 = (now // HOUR_MS - 5) * HOUR_MS
    conf = project_conf(store_url, t0)
    project = tmp_path / "project"
    project.mkdir()
    (project / "proj.py").write_text(PROJECT_MODULE.format(t0=t0, conf=conf))
    path = os.pathsep.join([str(previous_release), str(project)])
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(previous_release)],
        check=False,
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT_S,
        cwd=tmp_path,
        env=_clean_env(PYTHONPATH=path),
    )
    assert done.returncode == 0, f"the previous release failed:\n{done.stderr}"
    dump = json.loads(done.stdout)
    assert Path(dump["package"]).is_relative_to(previous_release.resolve()), dump["package"]
    assert dump["revision"] == "0005"
    return Made(store_url, project, conf, t0, dump)


def _raw(value: Any) -> Any:
    """As the old process printed it (JSON, ``default=str``)."""
    return json.loads(json.dumps(value, default=str, sort_keys=True))


def _schema_diff(url: str) -> list[Any]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"compare_type": True, "version_table": VERSION_TABLE}
            )
            return list(compare_metadata(context, metadata))
    finally:
        engine.dispose()


def _celery(made: Made, *argv: str) -> subprocess.CompletedProcess[str]:
    """``celery -A proj …`` with the new code, a process of its own in the made project."""
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", "proj", *argv],
        check=False,
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT_S,
        cwd=made.project,
        env=_clean_env(PYTHONPATH=str(made.project)),
    )


def _migrate_with_the_cli(made: Made) -> dict[str, Any]:
    """``celery -A proj durable-beat migrate --json``."""
    done = _celery(made, "durable-beat", "migrate", "--json")
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


@pytest.fixture
def upgraded(made: Made) -> Made:
    """The previous release's store after ``migrate`` (the CLI), nothing else written to it."""
    store = SqlStore(made.url)
    try:
        with pytest.raises(SchemaOutdated) as refused:
            store.ensure_schema()
    finally:
        store.close()
    assert "is at revision 0005" in str(refused.value)
    assert str(refused.value).endswith("run: celery -A proj durable-beat migrate")
    assert _migrate_with_the_cli(made) == {"revision": "0006"}
    return made


def test_a_new_beat_refuses_a_previous_release_store_in_one_line_until_migrate(
    made: Made, tmp_path: Path
) -> None:
    """The real ``celery beat`` process: exit 2 and the one line that says what to run, no
    traceback (on PostgreSQL with the store's lease, closing once queried the lease's new
    column, and its error buried the refusal)."""
    beat = ["beat", "-S", "celery_durable_beat.Scheduler", "--pidfile="]
    done = _celery(made, *beat, "-s", str(tmp_path / "unused"))
    output = done.stdout + done.stderr
    assert done.returncode == EXIT_INVALID_CONFIG, output[-3000:]
    assert (
        "beat refuses to start" in output and "run: celery -A proj durable-beat migrate" in output
    )
    assert "Traceback" not in output, output[-3000:]


def test_migrate_keeps_every_row_of_a_previous_release_store(upgraded: Made) -> None:
    """Every row the old release wrote is there after the upgrade, column by column, with the
    default namespace (``''``) and no config app; the fence row keeps its epoch, holder, token
    and expiry; the schema is exactly the declared one, and migrating again changes nothing."""
    before = upgraded.tables
    assert [row["version_num"] for row in before["durable_beat_alembic_version"]] == ["0005"]
    assert [(r["id"], r["epoch"], r["holder"]) for r in before["durable_beat_fence"]] == [
        (1, 2, upgraded.dump["lease"]["holder"])
    ]
    # Something of each kind, or the comparison below would prove little.
    sizes = {table: len(rows) for table, rows in before.items()}
    assert sizes["durable_beat_schedules"] == 4
    assert sizes["durable_beat_audit"] == 20
    assert sizes["durable_beat_runs"] == 3
    assert sizes["durable_beat_workers"] == 1
    assert sizes["durable_beat_actions"] == 8

    store = SqlStore(upgraded.url)
    try:
        assert store.migrate() == "0006"
        store.ensure_schema()
    finally:
        store.close()
    assert _schema_diff(upgraded.url) == []
    after = _raw(dump_tables(upgraded.url, NEW_TABLES))
    assert [row["version_num"] for row in after["durable_beat_alembic_version"]] == ["0006"]
    for table, rows in before.items():
        if table == VERSION_TABLE:
            continue
        added, removed = ADDED[table], REMOVED.get(table, set())
        assert len(after[table]) == len(rows), table
        for old, new in zip(rows, after[table], strict=True):
            assert set(new) == (set(old) - removed) | set(added), table
            assert {k: new[k] for k in added} == added, (table, new)
            kept = {k: v for k, v in new.items() if k not in added}
            assert kept == {k: v for k, v in old.items() if k not in removed}, table


def test_the_default_namespace_shows_what_the_previous_release_showed(upgraded: Made) -> None:
    """``DurableBeat(app)`` without ``durable_beat_namespace``, after the upgrade: ``list``,
    ``get``, ``next_ticks``, ``history``, ``actions`` and ``status`` answer exactly what the old
    release's answered before it (schedules, versions, next ticks, overdue, run states, who
    paused what and why, the leader and its epoch, the worker)."""
    old = upgraded.dump["views"]
    # The old answers hold what the store was given (else equality below proves little).
    listed = {view["name"]: view for view in old["list"]}
    assert {n: (v["version"], v["state"], v["source"]) for n, v in listed.items()} == {
        "Nightly Cleanup": (1, "active", "config"),
        "adhoc": (2, "active", "api"),
        "frozen": (1, "paused", "api"),
        "report": (2, "active", "config"),
    }
    assert listed["report"]["next_tick_ms"] == upgraded.t0 + 110 * MINUTE_MS
    assert old["get"]["report"]["overdue"] is not None
    assert old["get"]["frozen"]["paused_by"]["reason"] == "stays paused across the upgrade"
    first = old["history"]["report"]["events"][-1]
    assert (first["task_id"], first["run_state"]) == (
        f"report@{_iso(upgraded.t0 + 10 * MINUTE_MS)}",
        "succeeded",
    )
    assert old["status"]["epoch"] == 2
    assert old["status"]["leader"] == upgraded.dump["lease"]["holder"]

    after = _dt(upgraded.t0 + 145 * MINUTE_MS)
    with DurableBeat(upgraded.app()) as beat:
        assert [view.to_json() for view in beat.list()] == old["list"]
        for name in NAMES:
            assert beat.get(name, count=3).to_json() == old["get"][name], name
            shown = beat.get(name, count=3, after=after).to_json()
            assert shown == old["get_after"][name], name
            ticks = [t.to_json() for t in beat.next_ticks(name, 3, after=after)]
            assert ticks == old["next_ticks"][name], name
            assert beat.history(name, limit=100).to_json() == old["history"][name], name
            assert beat.actions(name, limit=100).to_json() == old["actions_of"][name], name
        assert beat.actions(limit=100).to_json() == old["actions"]
        # The one field namespaces add: the default namespace, null.
        assert beat.status().to_json() == {"namespace": None, **old["status"]}


def test_the_next_round_continues_where_the_previous_release_stopped(upgraded: Made) -> None:
    """The old leader's lease renews on the upgraded fence row at its epoch; a round of the new
    code (default namespace) fires the schedules from their stored next ticks, under ids of the
    same shape (``<key>@<instant>``), and sends none of the ticks the old release had recorded:
    the ones an operator backfilled are recorded ``deduplicated``, not published again."""
    t0, lease_made = upgraded.t0, upgraded.dump["lease"]
    recorded = {
        row["task_id"]
        for row in upgraded.tables["durable_beat_audit"]
        if row["outcome"] == "enqueued" and row["task_id"]
    }
    assert set(upgraded.dump["published"]) | set(upgraded.dump["operator_published"]) == recorded
    backfilled = [f"report@{_iso(t0 + m * MINUTE_MS)}" for m in (110, 120, 130)]
    assert set(backfilled) <= recorded

    app = upgraded.app()
    settings = Settings.from_conf(app.conf, environ={})
    store = SqlStore(upgraded.url)
    try:
        lease = StoreLease(
            store, LEASE_TTL_S, holder=lease_made["holder"], token=lease_made["token"]
        )
        renewed = lease.acquire_or_renew()
        assert (renewed.leader, renewed.epoch, renewed.holder) == (
            True,
            lease_made["epoch"],
            lease_made["holder"],
        )
        publisher = CapturingPublisher()
        dispatcher = Dispatcher(
            store,
            publisher,
            batch_size=settings.batch_size,
            quarantine_after=settings.quarantine_after,
        )
        now = t0 + 140 * MINUTE_MS
        stats = dispatcher.run_round(now, epoch=renewed.epoch)
        cleanup = tick_task_id("Nightly Cleanup", t0 + 135 * MINUTE_MS)
        sent = [m.task_id for m in publisher.messages]
        assert sorted(sent) == sorted([f"report@{_iso(now)}", cleanup])
        assert cleanup.startswith("nightly-cleanup-") and "@" in cleanup
        assert not set(sent) & recorded
        outcomes = {(e.task_id, e.outcome.value) for e in stats.events}
        assert {(task_id, "deduplicated") for task_id in backfilled} <= outcomes
        assert dispatcher.run_round(now, epoch=renewed.epoch).events == []
        assert publisher.messages[2:] == []
    finally:
        store.close()

    with DurableBeat(app) as beat:
        assert beat.get("report").next_tick_ms == t0 + 150 * MINUTE_MS
        assert [t.task_id for t in beat.next_ticks("report", 2, after=_dt(now))] == [
            f"report@{_iso(t0 + 150 * MINUTE_MS)}",
            f"report@{_iso(t0 + 160 * MINUTE_MS)}",
        ]
        events = beat.history("report", limit=100).events
        assert events[0].task_id == f"report@{_iso(now)}"
        assert [e.task_id for e in events if e.outcome == "deduplicated"] == backfilled[::-1]
        assert beat.status().epoch == lease_made["epoch"]
    rows = dump_tables(upgraded.url, {table: NEW_TABLES[table] for table in AUDIT_AND_FENCE})
    assert {row["namespace"] for row in rows["durable_beat_audit"]} == {""}
    assert [(r["namespace"], r["epoch"]) for r in rows["durable_beat_fence"]] == [("", 2)]
