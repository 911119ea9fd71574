"""What a beat process imports before its store is open (issue 29), in a fresh interpreter.

``celery beat`` starts Celery's CLI, which loads every ``celery.commands`` plugin: ours must be
the ``durable-beat`` stand-in alone, not its verbs, the control API, the importers or the text
formatting. Then it builds the Scheduler (``lazy=True`` for its banner first) from settings that
must not need pydantic. ``tests/integration/test_beat_imports.py`` checks the same past two real
rounds on PostgreSQL and Redis.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.procs import REPO

pytestmark = pytest.mark.unit

FOREIGN = ("alembic", "mako", "pydantic", "pydantic_core", "fastapi", "starlette", "uvicorn")
OURS = ("web", "cli.commands", "cli.format", "importers", "control", "settings_model", "metrics")


def loaded_after(code: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def unwanted(loaded: set[str], foreign: tuple[str, ...] = FOREIGN) -> list[str]:
    ours = tuple(f"celery_durable_beat.{name}" for name in OURS)
    return sorted(m for m in loaded if m.split(".")[0] in foreign or m.startswith(ours))


def test_celerys_cli_loads_only_the_durable_beat_stand_in() -> None:
    # Other installed plugins (Flower) may load what they like: only ours is checked here.
    loaded = loaded_after("import celery.bin.celery")
    assert "celery_durable_beat.cli" in loaded  # the entry point really was loaded
    assert unwanted(loaded, foreign=()) == []
    assert sorted(m for m in loaded if m.startswith("celery_durable_beat")) == [
        "celery_durable_beat",
        "celery_durable_beat.cli",
        "celery_durable_beat.exceptions",  # the package's own eager names
        "celery_durable_beat.ids",
    ]


def test_the_scheduler_and_plain_settings_load_no_pydantic() -> None:
    loaded = loaded_after(
        "from celery import Celery\n"
        "from celery_durable_beat import Scheduler\n"
        "app = Celery('lazy', broker='memory://', set_as_current=False)\n"
        "app.conf.update(durable_beat_url='postgresql://beat@db/beat', durable_beat_redact=['x'],\n"
        "    durable_beat_api_tokens={'t' * 16: 'viewer', 'u' * 16: {'role': 'admin', 'name': 'a'}}"
        ",\n"
        "    durable_beat_lease_url='redis://lease:6379/1', durable_beat_default_missed='skip')\n"
        "banner = Scheduler(app, lazy=True)\n"
        "assert banner._refusal is None, banner._refusal\n"
    )
    assert "celery_durable_beat.scheduler" in loaded
    assert unwanted(loaded) == []


def test_a_setting_to_convert_goes_through_pydantic_with_the_same_result() -> None:
    """The converse: a value that is not plain does load the model, and is converted by it."""
    loaded = loaded_after(
        "from celery_durable_beat.settings import Settings\n"
        "assert Settings.from_conf({'durable_beat_poll_interval': '2'}).poll_interval == 2.0\n"
    )
    assert "celery_durable_beat.settings_model" in loaded and "pydantic" in loaded


def test_the_cli_group_stand_in_answers_as_the_verbs_group() -> None:
    from celery_durable_beat.cli import EXIT_CODES, HELP, commands, durable_beat, one_line

    assert durable_beat.commands is commands.durable_beat.commands
    assert "list" in durable_beat.list_commands(None)  # type: ignore[arg-type]
    assert durable_beat.help == commands.durable_beat.help == HELP
    assert (EXIT_CODES, one_line) == (commands.EXIT_CODES, commands.one_line)
