"""A real Django project on disk, as docs/django.md builds one, for the tests of SPEC §16.

``write_project`` lays out ``proj/`` (``settings.py``, ``celery.py``, ``__init__.py``,
``tasks.py``) the way Celery's "First steps with Django" does: ``DJANGO_SETTINGS_MODULE`` set in
``celery.py``, ``config_from_object("django.conf:settings", namespace="CELERY")``, tasks
autodiscovered, django-celery-results' ``django-db`` as the result backend, ``TIME_ZONE`` and
no ``CELERY_TIMEZONE``. Everything Django runs in a process of its own (``celery``, or this
module as ``python -m tests.support.django_project AFTER...``), so the test process never
configures Django's process-wide settings.

Run as a module in the project's folder, it prints, for each ``AFTER`` instant, stock beat's
instants for the project's crontab entry (``stock_beat.fires``) beside ours: FrozenBeat's
dispatched ticks and ``DurableBeat.next_ticks`` over FrozenBeat's store, for both entries.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.support.procs import REPO

ENTRIES = ("morning-cron", "morning-crontab")
"""The same 09:00 twice: a cron string and ``crontab(hour=9, minute=0)``."""
ZONE = "America/New_York"
COUNT = 4
CLI_TIMEOUT_S = 60

CELERY_PY = """\
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")

app = Celery("proj")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
"""
INIT_PY = """\
from .celery import app as celery_app

__all__ = ("celery_app",)
"""
TASKS_PY = """\
from celery import shared_task


@shared_task
def report():
    return "reported"
"""
SETTINGS_PY = """\
from celery.schedules import crontab

SECRET_KEY = "only-for-this-test"
TIME_ZONE = {zone!r}
USE_TZ = True
INSTALLED_APPS = ["django_celery_results", "proj"]
DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": {django_db!r}}}}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

CELERY_BROKER_URL = "memory://"
CELERY_RESULT_BACKEND = "django-db"
CELERY_RESULT_EXTENDED = True
CELERY_DURABLE_BEAT_URL = {store_url!r}
CELERY_BEAT_SCHEDULE = {{
    "morning-cron": {{"task": "proj.tasks.report", "schedule": "0 9 * * *"}},
    "morning-crontab": {{"task": "proj.tasks.report", "schedule": crontab(hour=9, minute=0)}},
}}
"""


def write_project(folder: Path, store_url: str, **extra: Any) -> Path:
    """``folder/proj`` as above; ``extra`` settings (``CELERY_DURABLE_BEAT_LEASE_TTL=-5``) are
    appended to ``settings.py``. Returns ``folder``."""
    package = folder / "proj"
    package.mkdir(parents=True, exist_ok=True)
    settings = SETTINGS_PY.format(
        zone=ZONE, django_db=str(folder / "django.sqlite3"), store_url=store_url
    )
    settings += "".join(f"{name} = {value!r}\n" for name, value in extra.items())
    for name, text in (
        ("__init__.py", INIT_PY),
        ("celery.py", CELERY_PY),
        ("tasks.py", TASKS_PY),
        ("settings.py", settings),
    ):
        (package / name).write_text(text)
    return folder


def project_env(folder: Path) -> dict[str, str]:
    """The environment of a process in the project: its folder (and this repository, for
    ``tests.support``) importable, none of the variables that would override its settings."""
    env = {**os.environ, "PYTHONPATH": f"{folder}{os.pathsep}{REPO}"}
    for name in ("DURABLE_BEAT_URL", "DURABLE_BEAT_API_TOKENS", "DJANGO_SETTINGS_MODULE"):
        env.pop(name, None)
    return env


def celery(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m celery -A proj <args>`` run from the project's folder."""
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", "proj", *args],
        cwd=folder,
        env=project_env(folder),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


def parity(folder: Path, afters: list[datetime]) -> dict[str, Any]:
    """This module's report (see the module docstring), run in the project's folder."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.django_project", *(a.isoformat() for a in afters)],
        cwd=folder,
        env=project_env(folder),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def _report(after: datetime) -> dict[str, Any]:
    from proj.celery import app  # the project in the current folder, on PYTHONPATH

    from celery_durable_beat import DurableBeat
    from celery_durable_beat.testing import FrozenBeat
    from tests.support import stock_beat

    stock = stock_beat.fires(stock_beat.entry_schedule(app, "morning-crontab"), after, COUNT)
    with FrozenBeat(app, start=after) as frozen:
        control = DurableBeat(app, store=frozen.store)
        planned = {
            name: [t.tick_ms for t in control.next_ticks(name, COUNT, after=after)]
            for name in ENTRIES
        }
        ran = frozen.advance(f"{COUNT}d")
    dispatched = {name: [t.tick_ms for t in ran if t.schedule == name] for name in ENTRIES}
    zone = app.timezone
    return {
        "celery_zone": str(getattr(zone, "key", zone)),
        "stock": stock,
        "next_ticks": planned,
        "frozen": dispatched,
    }


def main(argv: list[str]) -> None:
    print(json.dumps({text: _report(datetime.fromisoformat(text)) for text in argv}))


if __name__ == "__main__":
    main(sys.argv[1:])
