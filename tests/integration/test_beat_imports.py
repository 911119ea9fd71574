"""A beat process loads only what a beat runs (issue 29): no pydantic, Alembic, web stack,
importers, CLI verbs or control API, and no Prometheus client with metrics off.

Each of these is megabytes of RSS and tens of milliseconds of start-up that a beat never uses:
the settings are read without pydantic when they are plain (``settings``), Alembic only creates
or upgrades a schema, the rest belongs to other processes. Checked in a fresh interpreter that
builds a ``Scheduler`` as ``celery beat`` does, on PostgreSQL and Redis, with a config that sets
the usual settings (tokens, redaction, a sentinel-free lease) and runs two real rounds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from celery_durable_beat.store.sql import SqlStore
from tests.support.procs import REPO

pytestmark = pytest.mark.integration

NEVER_IN_BEAT = ("alembic", "mako", "pydantic", "pydantic_core", "fastapi", "starlette", "uvicorn")
NEVER_IN_BEAT += ("jinja2", "prometheus_client")
OURS_NEVER_IN_BEAT = ("web", "cli", "importers", "control", "settings_model", "metrics", "testing")
OURS_NEVER_IN_BEAT += ("runs.pg_direct",)  # the worker side's direct statements

BEAT = """
import json, sys
from celery import Celery
from celery.schedules import crontab

app = Celery("imports", broker={redis!r}, set_as_current=False)
app.conf.update(
    beat_schedule={{
        "cron": {{"task": "t.cron", "schedule": crontab(minute="*/5")}},
        "every": {{"task": "t.every", "schedule": 30.0, "kwargs": {{"password": "x"}}}},
    }},
    durable_beat_url={db!r},
    durable_beat_api_tokens={{"v" * 16: "viewer", "o" * 16: {{"role": "operator", "name": "ops"}}}},
    durable_beat_redact=["password", "token"],
    durable_beat_poll_interval=0.5,
    durable_beat_default_missed="run_once",
)
from celery_durable_beat import Scheduler

beat = Scheduler(app, lazy=False)
for _ in range(2):
    beat._wake_at = 0.0
    beat.tick()
beat.close()
print(json.dumps(sorted(sys.modules)))
"""


def test_a_beat_process_imports_nothing_it_does_not_run(pg_url: str, redis_url: str) -> None:
    store = SqlStore(pg_url)
    store.migrate()  # here, not in the beat: creating a schema is Alembic's legitimate use
    store.close()
    done = subprocess.run(
        [sys.executable, "-c", BEAT.format(redis=redis_url, db=pg_url)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert "celery_durable_beat.dispatch" in loaded  # it really ran a round
    foreign = sorted(m for m in loaded if m.split(".")[0] in NEVER_IN_BEAT)
    assert foreign == [], foreign
    never = tuple(f"celery_durable_beat.{name}" for name in OURS_NEVER_IN_BEAT)
    ours = sorted(m for m in loaded if m.startswith(never))
    assert ours == [], ours
