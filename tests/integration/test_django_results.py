"""A real Django project with django-celery-results: its ``periodic_task_name`` column filled
for every tick (SPEC §4, §16).

django-celery-results stores ``task.request.periodic_task_name`` (with ``result_extended``), a
header django-celery-beat's scheduler sets to the entry's name. Users who filter their results
admin by it must see durable beat's ticks there the same way, so this test builds the project a
user would, under ``tmp_path``: ``proj/settings.py`` (``INSTALLED_APPS``, a SQLite database,
every Celery and durable beat setting under Django's ``CELERY_`` namespace), ``proj/celery.py``
(``config_from_object("django.conf:settings", namespace="CELERY")``, ``install(app)``),
``manage.py migrate``; then a real beat, a real worker and a manual run (``celery -A proj
durable-beat trigger``), and it reads the column from Django's own table. django-celery-beat's
own scheduler sends one message of the same name beside them, so the comparison is with the
peer's code, not with our reading of it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Callable
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis

from celery_durable_beat.ids import tick_task_id
from tests.support.procs import REPO, CeleryProcess, wait_until
from tests.support.rig import BEAT_ARGS, WORKER_FLAGS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
T = TypeVar("T")

NAME = "Ops heartbeat"
"""The schedule's name, not a task id's key: upper case and a space, stored verbatim."""
TASK = "monitoring.tasks.heartbeat"
"""A task of a Django app of the project's, found by ``autodiscover_tasks``."""

SETTINGS = """\
SECRET_KEY = "test-only"
INSTALLED_APPS = ["django_celery_results", "django_celery_beat", "monitoring"]
DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": {database!r}}}}}
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

CELERY_BROKER_URL = {broker!r}
CELERY_RESULT_BACKEND = "django-db"
CELERY_RESULT_EXTENDED = True  # django-celery-results stores periodic_task_name only then
CELERY_DURABLE_BEAT_URL = {store!r}
CELERY_BEAT_SCHEDULE = {{{name!r}: {{"task": {task!r}, "schedule": "@every 1s"}}}}
"""

CELERY_MODULE = """\
import os

from celery import Celery

from celery_durable_beat import install

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")

app = Celery("proj")
app.config_from_object("django.conf:settings", namespace="CELERY")
install(app)
app.autodiscover_tasks()
"""

FILES = {
    "manage.py": """\
import os
import sys

from django.core.management import execute_from_command_line

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")
execute_from_command_line(sys.argv)
""",
    "proj/__init__.py": 'from proj.celery import app as celery_app\n\n__all__ = ("celery_app",)\n',
    "proj/celery.py": CELERY_MODULE,
    "monitoring/__init__.py": "",
    "monitoring/tasks.py": """\
from celery import shared_task


@shared_task
def heartbeat() -> str:
    return "ok"
""",
}

DJANGO_CELERY_BEAT = f"""\
import django

django.setup()

from django_celery_beat.models import IntervalSchedule, PeriodicTask
from django_celery_beat.schedulers import DatabaseScheduler

from proj.celery import app

hourly, _ = IntervalSchedule.objects.get_or_create(every=1, period=IntervalSchedule.HOURS)
model = PeriodicTask.objects.create(name={NAME!r}, task={TASK!r}, interval=hourly)
scheduler = DatabaseScheduler(app=app, lazy=True)
print(scheduler.apply_async(scheduler.Entry(model, app=app), advance=False).id)
"""
"""django-celery-beat's own scheduler sends its entry of the same name, as its beat would; the
task id is printed."""


class DjangoProject:
    """The project's folder, the environment its processes share, and what they left behind."""

    def __init__(self, root: Path, broker: str) -> None:
        self.root = root
        self.database = root / "django.sqlite3"
        for relative, text in FILES.items():
            path = root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        settings = SETTINGS.format(
            database=str(self.database),
            broker=broker,
            store=f"sqlite:///{root / 'beat.sqlite3'}",
            name=NAME,
            task=TASK,
        )
        (root / "proj" / "settings.py").write_text(settings)
        # Empty: the variables that would override the project's own settings are not read.
        self.env = {
            "DJANGO_SETTINGS_MODULE": "proj.settings",
            "DURABLE_BEAT_URL": "",
            "DURABLE_BEAT_API_TOKENS": "",
        }

    def python(self, *args: str) -> str:
        """``python ARGS`` in the project, as ``CeleryProcess`` runs celery; its stdout."""
        done = subprocess.run(
            [sys.executable, *args],
            cwd=self.root,
            env={**os.environ, **self.env, "PYTHONPATH": f"{self.root}{os.pathsep}{REPO}"},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    def celery(self, stack: ExitStack, args: list[str], name: str) -> CeleryProcess:
        """``celery -A proj ARGS``, killed when ``stack`` closes."""
        proc = CeleryProcess(self.root, "proj", args, self.env, name)
        stack.enter_context(closing(proc))
        return proc

    def results(self) -> dict[str, tuple[str | None, str]]:
        """``task_id -> (periodic_task_name, status)`` of django-celery-results' table."""
        with closing(sqlite3.connect(self.database, timeout=10)) as conn:
            rows = conn.execute(
                "SELECT task_id, periodic_task_name, status FROM django_celery_results_taskresult"
            ).fetchall()
        return {task_id: (name, status) for task_id, name, status in rows}


@pytest.fixture
def project(tmp_path: Path, redis_url: str) -> DjangoProject:
    """The project, migrated by ``manage.py migrate`` as a user would."""
    made = DjangoProject(tmp_path / "site", redis_url)
    made.python("manage.py", "migrate", "--verbosity", "0")
    return made


def queued(redis_url: str) -> list[dict[str, Any]]:
    """The raw messages waiting in Celery's default queue, oldest first."""
    client = redis.Redis.from_url(redis_url)
    try:
        return [json.loads(raw) for raw in client.lrange("celery", 0, -1)[::-1]]
    finally:
        client.close()


def within(check: Callable[[], T], timeout: float, what: str, *procs: CeleryProcess) -> T:
    """``wait_until``, its failure showing the end of each process's output."""
    try:
        return wait_until(check, timeout, what)
    except AssertionError as exc:
        raise AssertionError("\n".join([str(exc), *(p.tail() for p in procs)])) from None


def test_every_tick_fills_periodic_task_name_as_django_celery_beat_does(
    project: DjangoProject, redis_url: str
) -> None:
    with ExitStack() as stack:
        beat = project.celery(stack, BEAT_ARGS, "beat")
        line = f"Sending due task {NAME} ({TASK})"
        within(lambda: line in beat.output(), 60, "beat's first tick", beat)
        theirs_id = project.python("-c", DJANGO_CELERY_BEAT).strip()
        trigger = ("-m", "celery", "-A", "proj", "durable-beat", "trigger", NAME, "--json")
        manual_id = json.loads(project.python(*trigger))["task_id"]

        # On the broker: the name under the same header, in the same place, as the peer's.
        messages = {m["headers"]["id"]: m for m in queued(redis_url)}
        theirs = messages[theirs_id]
        manual = messages[manual_id]
        auto = next(m for m in messages.values() if m["headers"].get("periodic_trigger") == "auto")
        for message in (theirs, manual, auto):
            assert message["headers"]["periodic_task_name"] == NAME
            assert "periodic_task_name" not in message["properties"]
        assert manual["headers"]["periodic_trigger"] == "manual"

        node = f"django-{uuid.uuid4().hex[:8]}@%h"  # a node name of its own (rig.py says why)
        args = ["worker", "-P", "solo", "-n", node, *WORKER_FLAGS]
        worker = project.celery(stack, args, "worker")
        wanted = {theirs_id, manual_id, auto["headers"]["id"]}

        def stored() -> dict[str, tuple[str | None, str]]:
            found = project.results()
            return found if wanted <= found.keys() else {}

        rows = within(stored, 60, f"the results of {sorted(wanted)}", worker, beat)
    for task_id in wanted:
        assert rows[task_id] == (NAME, "SUCCESS"), task_id
    key = tick_task_id(NAME, 0).partition("@")[0]
    automatic = [name for task_id, (name, _) in rows.items() if task_id.startswith(f"{key}@")]
    assert set(automatic) == {NAME}  # every tick the worker ran, automatic or manual
