"""``celery -A proj durable-beat …`` against a real store and a real broker.

Each test writes a small Celery app module to its temporary folder and runs the CLI as the
shell does, ``celery -A proj durable-beat …``: through Celery's own ``celery`` command group,
which loads the module from that folder and finds our verbs through the installed
``celery.commands`` entry point (``pip install -e .``). ``Project.cli`` runs that group in this
process (click's runner: the exit code, stdout and stderr kept apart, and the traceback of any
exception that escapes appended to stderr as the interpreter would print it), since a
subprocess costs a second of imports; ``Project.cli_process`` runs ``python -m celery`` for
real, for the stories about the process itself (an unreachable store, ``serve``, ``check``).
Dispatch rounds run in this process against the same database, with an explicit ``now_ms``.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import traceback
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from celery_durable_beat import DurableBeat
from celery_durable_beat.celery_config import definitions_from_app
from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.publish.capturing import CapturingPublisher
from celery_durable_beat.settings import Settings
from celery_durable_beat.store.sql import SqlStore
from celery_durable_beat.sync import sync_definitions
from tests.support.procs import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CLI_TIMEOUT_S = 60
APP_MODULE = """\
from celery import Celery

app = Celery("proj", broker={broker!r}, set_as_current=False)
app.conf.update({conf!r})
"""
FAST = {"task": "proj.pulse", "schedule": "@every:100", "missed": "backfill", "backfill_max": 1000}


UNDER_TEST_ENV = ("DURABLE_BEAT_URL", "DURABLE_BEAT_API_TOKENS")
"""Unset for every command: the app module's settings are the ones under test."""


def run_cli(folder: Path, module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``celery -A <module> <args>`` in this process, as ``python -m celery`` runs it (Celery's
    ``celery`` group with ``auto_envvar_prefix="CELERY"``), the module imported afresh from
    ``folder`` (a test may rewrite it between two commands) and its app closed afterwards, as
    the end of a process would. An exception that escapes the command is appended to stderr as
    a traceback, so the tests' ``"Traceback" not in stderr`` keeps its meaning."""
    from celery.bin.celery import celery as celery_group
    from click.testing import CliRunner

    runner = CliRunner()  # click >= 8.2: stdout and stderr apart, like a process's pipes
    sys.modules.pop(module, None)
    sys.path.insert(0, str(folder))
    try:
        result = runner.invoke(
            celery_group,
            ["-A", module, *args],
            prog_name="celery",
            env=dict.fromkeys(UNDER_TEST_ENV),
            auto_envvar_prefix="CELERY",
        )
    finally:
        sys.path.remove(str(folder))
        loaded = sys.modules.pop(module, None)
        app = getattr(loaded, "app", None)
        if app is not None:
            app.close()
    stderr = result.stderr
    if result.exc_info is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(*result.exc_info))
    return subprocess.CompletedProcess(
        ["celery", "-A", module, *args], result.exit_code, result.stdout, stderr
    )


@dataclass
class Project:
    """A Celery app module on disk, the same app in this process, and its store."""

    folder: Path
    app: Celery
    store: SqlStore

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``celery -A proj durable-beat <args>``, run in this process."""
        return run_cli(self.folder, "proj", "durable-beat", *args)

    def cli_process(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``python -m celery -A proj durable-beat <args>``, a process of its own."""
        env = {**os.environ, "PYTHONPATH": str(self.folder)}
        for name in UNDER_TEST_ENV:
            env.pop(name, None)
        return subprocess.run(
            [sys.executable, "-m", "celery", "-A", "proj", "durable-beat", *args],
            cwd=self.folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
            check=False,
        )

    def ok_json(self, *args: str) -> Any:
        done = self.cli(*args, "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def ok_text(self, *args: str) -> str:
        done = self.cli(*args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def beat(self, **kwargs: Any) -> DurableBeat:
        return DurableBeat(self.app, store=self.store, **kwargs)

    def sync_config(self) -> None:
        """What the leader does when it starts: beat_schedule into the store."""
        settings = Settings.from_conf(self.app.conf, environ={})
        sync_definitions(self.store, definitions_from_app(self.app, settings), self.store.now_ms())

    def dispatch_at(self, now_ms: int) -> list[int]:
        captured = CapturingPublisher()
        Dispatcher(self.store, captured, batch_size=100).run_round(now_ms, epoch=1)
        return [m.tick_ms for m in captured.messages]


def write_project(
    folder: Path,
    url: str,
    broker: str = "memory://",
    beat_schedule: dict[str, Any] | None = None,
    **extra: Any,
) -> Celery:
    conf = {
        "timezone": "Europe/Berlin",
        "durable_beat_url": url,
        "beat_schedule": beat_schedule or {},
        "broker_connection_retry_on_startup": False,
        **extra,
    }
    (folder / "proj.py").write_text(APP_MODULE.format(broker=broker, conf=conf))
    app = Celery("proj", broker=broker, set_as_current=False)
    app.conf.update(conf)
    return app


def make_project(folder: Path, url: str, **kwargs: Any) -> Iterator[Project]:
    app = write_project(folder, url, **kwargs)
    store = SqlStore(url)
    store.ensure_schema()
    store.register_epoch(1)
    yield Project(folder, app, store)
    store.close()


@pytest.fixture
def pg_project(tmp_path: Path, pg_url: str) -> Iterator[Project]:
    nightly = {"nightly-digest": {"task": "proj.digest", "schedule": "0 3 * * *"}}
    yield from make_project(tmp_path, pg_url, beat_schedule=nightly)


def one_error_line(done: subprocess.CompletedProcess[str], code: int) -> str:
    """The failure contract: the exit code, nothing on stdout, exactly one line on stderr."""
    assert done.returncode == code, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert lines[0].startswith("Error: ")
    return lines[0]


# -- list, show, next -------------------------------------------------------------------------
def test_list_shows_config_and_api_schedules_with_their_source(pg_project: Project) -> None:
    pg_project.sync_config()
    pg_project.beat().upsert("adhoc-report", {"task": "proj.report", "schedule": "@every 15m"})
    items = pg_project.ok_json("list")
    assert [(i["name"], i["source"], i["state"]) for i in items] == [
        ("adhoc-report", "api", "active"),
        ("nightly-digest", "config", "active"),
    ]
    nightly = items[1]
    assert nightly["tz"] == "Europe/Berlin"
    assert nightly["schedule"] == "0 3 * * *"
    assert nightly["next_tick"][11:19] == "03:00:00"
    assert nightly["next_tick"][19:] in ("+01:00", "+02:00")
    text = pg_project.ok_text("list").splitlines()
    assert text[0].split() == [
        "NAME",
        "STATE",
        "SOURCE",
        "VER",
        "SCHEDULE",
        "TZ",
        "NEXT",
        "TICK",
        "LAST",
        "TASK",
    ]
    assert text[1].split()[:3] == ["adhoc-report", "active", "api"]
    assert text[2].split()[:3] == ["nightly-digest", "active", "config"]
    assert text[0].index("SOURCE") == text[1].index("api") == text[2].index("config")  # aligned


@pytest.fixture
def sqlite_project(tmp_path: Path, sqlite_url: str) -> Iterator[Project]:
    nyc = {
        "nyc-report": {"task": "proj.report", "schedule": "30 2 * * *", "tz": "America/New_York"}
    }
    yield from make_project(tmp_path, sqlite_url, beat_schedule=nyc)


def test_show_across_spring_forward(sqlite_project: Project) -> None:
    project = sqlite_project
    project.sync_config()
    after = ("--after", "2026-03-06T12:00:00Z", "--count", "3")
    shown = project.ok_json("show", "nyc-report", *after)
    assert shown["description"] == "at 02:30 every day (America/New_York)"
    assert shown["next"] == [
        "2026-03-07T02:30:00-05:00",
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
    ]
    assert shown["source"] == "config"
    assert shown["tz"] == "America/New_York"
    text = project.ok_text("show", "nyc-report", *after)
    assert "at 02:30 every day (America/New_York)" in text
    assert "2026-03-08T03:00:00-04:00  nyc-report@2026-03-08T07:00:00Z" in text
    ticks = project.ok_json("next", "nyc-report", *after)
    assert [t["tick"] for t in ticks] == shown["next"]
    assert ticks[1] == {
        "tick_ms": 1772953200000,
        "tick": "2026-03-08T03:00:00-04:00",
        "task_id": "nyc-report@2026-03-08T07:00:00Z",
    }


# -- pause, resume ----------------------------------------------------------------------------
def test_pause_stops_ticks_and_resume_does_not_replay(pg_project: Project) -> None:
    store = pg_project.store
    pg_project.beat().upsert("pulse", FAST)
    ticked = wait_until(lambda: pg_project.dispatch_at(store.now_ms()), 10, "pulse to tick")
    paused = pg_project.ok_json("pause", "pulse")
    assert (paused["state"], paused["next_tick"]) == ("paused", None)
    # The paused window: five ticks fall due by the store's clock while nothing may fire them.
    wait_until(lambda: store.now_ms() > ticked[-1] + 500, 10, "five ticks due while paused")
    assert pg_project.dispatch_at(store.now_ms() + 60_000) == []
    resume_from = pg_project.store.now_ms()
    resumed = pg_project.ok_json("resume", "pulse")
    resume_until = pg_project.store.now_ms()
    first = resumed["next_tick_ms"]
    assert resumed["state"] == "active"
    assert resume_from < first <= resume_until + 100
    assert pg_project.dispatch_at(first + 250) == [first, first + 100, first + 200]
    assert "paused pulse (state paused)" in pg_project.ok_text("pause", "pulse")


# -- trigger ----------------------------------------------------------------------------------
@pytest.fixture
def queue() -> str:
    """A queue of this test's own, so no worker of another test can consume the message."""
    return f"cli-trigger-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def redis_project(tmp_path: Path, pg_url: str, redis_url: str, queue: str) -> Iterator[Project]:
    yield from make_project(tmp_path, pg_url, broker=redis_url, task_default_queue=queue)


def test_trigger_with_the_same_key_runs_once(
    redis_project: Project, redis_url: str, queue: str
) -> None:
    import redis

    beat = redis_project.beat()
    beat.upsert(
        "digest",
        {
            "task": "proj.digest",
            "schedule": "0 3 * * *",
            "kwargs": {"day": "{{scheduled_for}}", "full": False},
        },
    )
    next_before = beat.get("digest").next_tick_ms
    key = ("--idempotency-key", "deploy-42", "--kwargs", '{"full": true}')
    first = redis_project.ok_json("trigger", "digest", *key)
    again = redis_project.ok_json("trigger", "digest", *key)
    assert first["created"] is True
    assert again == {"task_id": first["task_id"], "created": False}
    assert first["task_id"].startswith("digest@manual-")
    client = redis.Redis.from_url(redis_url)
    raw = client.lrange(queue, 0, -1)
    assert len(raw) == 1  # one message in the broker
    message = json.loads(raw[0])
    assert message["headers"]["id"] == first["task_id"]
    assert message["headers"]["periodic_trigger"] == "manual"
    assert message["headers"]["periodic_task_name"] == "digest"
    _args, kwargs, _embed = json.loads(base64.b64decode(message["body"]))
    assert kwargs["full"] is True
    assert kwargs["day"].startswith("20")
    assert beat.get("digest").next_tick_ms == next_before  # the plan did not move
    events = redis_project.ok_json("history", "digest")["events"]
    assert [(e["trigger"], e["outcome"], e["task_id"]) for e in events] == [
        ("manual", "enqueued", first["task_id"]),
    ]
    text = redis_project.ok_text("trigger", "digest")
    assert text.startswith("sent a manual run of digest: task id digest@manual-")
    assert client.llen(queue) == 2
    client.delete(queue)
    client.close()


def test_bad_input_is_one_line(pg_project: Project) -> None:
    pg_project.sync_config()
    bad_json = one_error_line(pg_project.cli("trigger", "nightly-digest", "--kwargs", "{day:"), 2)
    assert "--kwargs is not valid JSON" in bad_json
    not_object = one_error_line(pg_project.cli("trigger", "nightly-digest", "--kwargs", "[1]"), 2)
    assert "must be a JSON object" in not_object
    unknown = one_error_line(pg_project.cli("show", "no-such-schedule"), 3)
    assert 'no schedule named "no-such-schedule"' in unknown
    assert "NAME" in one_error_line(pg_project.cli("pause"), 2)
    assert "abc" in one_error_line(pg_project.cli("next", "nightly-digest", "--count", "abc"), 2)


# -- history ----------------------------------------------------------------------------------
def test_history_pages_are_disjoint_newest_first(pg_project: Project) -> None:
    pg_project.beat().upsert("pulse", {**FAST, "schedule": "@every 1s"})
    pg_project.dispatch_at(pg_project.store.now_ms() + 25_000)
    every = [e.to_json() for e in pg_project.beat().history("pulse", limit=100).events]
    assert len(every) >= 25
    first = pg_project.ok_json("history", "pulse", "--limit", "10")
    second = pg_project.ok_json(
        "history", "pulse", "--limit", "10", "--cursor", first["next_cursor"]
    )
    assert first["events"] == every[:10]
    assert second["events"] == every[10:20]
    ticks = [e["tick_ms"] for e in first["events"] + second["events"]]
    assert ticks == sorted(set(ticks), reverse=True)  # disjoint, newest first
    assert second["next_cursor"] not in (None, first["next_cursor"])
    text = pg_project.ok_text("history", "pulse", "--limit", "3").splitlines()
    assert text[0].split()[:4] == ["RECORDED", "(UTC)", "TICK", "(UTC)"]
    assert len(text) == 5
    assert text[-1].startswith("older events: --cursor ")
    too_many = one_error_line(pg_project.cli("history", "pulse", "--limit", "101"), 2)
    assert "1 to 100" in too_many
    assert "101" in too_many


# -- status, migrate, an unreachable store ----------------------------------------------------
def test_status_and_migrate(pg_project: Project) -> None:
    pg_project.sync_config()
    assert pg_project.ok_json("status") == {
        "namespace": None,
        "leader": None,
        "epoch": 1,
        "lease_expires_at": None,
        "counts": {"active": 1, "paused": 0, "archived": 0, "quarantined": 0},
        "due_backlog": 0,
        "workers": [],
    }
    assert pg_project.ok_json("migrate")["revision"]
    archived = pg_project.ok_text("archive", "nightly-digest")
    assert archived.strip() == "archived nightly-digest (state archived)"


def test_unreachable_store_names_the_url_without_its_password(tmp_path: Path) -> None:
    url = "postgresql+psycopg://postgres:secretpw@127.0.0.1:1/x"
    project = Project(tmp_path, write_project(tmp_path, url), SqlStore(url))
    line = one_error_line(project.cli_process("list"), 5)
    assert "postgresql+psycopg://postgres:***@127.0.0.1:1/x" in line
    assert "secretpw" not in line
