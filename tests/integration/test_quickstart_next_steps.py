"""The demo ends by showing the next step (issue #11 item 8): every command it prints works.

The quickstart app is copied to a temporary folder (its SQLite store and queue folder land there,
not in the checkout), its config synced into the store as beat does when it starts leading, and
each printed command is run for real.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from celery_durable_beat.celery_config import definitions_from_app
from celery_durable_beat.settings import Settings
from celery_durable_beat.store.sql import SqlStore
from celery_durable_beat.sync import sync_definitions
from tests.support.procs import REPO

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

QUICKSTART = REPO / "examples" / "quickstart"


def load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_next_step_the_demo_prints_works(tmp_path: Path) -> None:
    shutil.copy(QUICKSTART / "app.py", tmp_path / "app.py")
    app = load(tmp_path / "app.py", "quickstart_copy").app
    settings = Settings.from_conf(app.conf, environ={})
    store = SqlStore(settings.url)
    store.ensure_schema()
    sync_definitions(store, definitions_from_app(app, settings), store.now_ms())
    store.close()
    command = f"{sys.executable} -m celery -A app"
    steps = load(QUICKSTART / "run.py", "quickstart_run").next_steps(command)
    verbs = [line.split(command, 1)[1].split("#", 1)[0].strip() for line in steps]
    assert verbs[:2] == ["durable-beat list", "durable-beat history heartbeat"]
    assert "durable-beat check" in verbs
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("DURABLE_BEAT_URL", None)
    for verb in verbs:
        done = subprocess.run(
            [sys.executable, "-m", "celery", "-A", "app", *shlex.split(verb)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, (verb, done.stderr)
        assert done.stderr == "", (verb, done.stderr)
        if verb == "durable-beat check":
            assert done.stdout.splitlines()[0] == "2 schedules OK"
        if verb == "durable-beat list":
            assert "heartbeat" in done.stdout and "minutely-report" in done.stdout
