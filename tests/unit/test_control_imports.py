"""Importing the control API does not load the beat loop (issue 23).

``DurableBeat`` is imported by every surface (the CLI's control verbs, the web app, user code);
none of them runs a round, so none should pay for (or depend on) the round's modules. Backends
come from ``celery_durable_beat.backends``, ``first_tick_ms`` from the pure core. import-linter
holds the same line statically ("The control API never loads the round"); this proves it at run
time, in a fresh interpreter, where whatever a package ``__init__`` pulls in shows too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.procs import REPO

pytestmark = pytest.mark.unit

ROUND = {
    "celery_durable_beat.beat_loop",
    "celery_durable_beat.dispatch",
    "celery_durable_beat.round_records",
    "celery_durable_beat.leadership",
    "celery_durable_beat.sync",
    "celery_durable_beat.wiring",
}

# What to import, as a surface would: the package's lazy name, the control package, the backend
# factories it shares with beat, and the two surfaces built on the control API.
IMPORTS = {
    "lazy-DurableBeat": "from celery_durable_beat import DurableBeat",
    "control": "import celery_durable_beat.control",
    "backends": "import celery_durable_beat.backends",
    "cli": "import celery_durable_beat.cli.commands",
    "web": "import celery_durable_beat.web.app",
}


def loaded_after(statement: str) -> set[str]:
    """The ``celery_durable_beat`` modules a fresh interpreter holds after ``statement``."""
    code = (
        f"{statement}\n"
        "import json, sys\n"
        "print(json.dumps(sorted(n for n in sys.modules if n.startswith('celery_durable_beat'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(json.loads(done.stdout))


@pytest.mark.parametrize("statement", IMPORTS.values(), ids=IMPORTS.keys())
def test_importing_the_control_api_loads_none_of_the_round(statement: str) -> None:
    loaded = loaded_after(statement)
    assert "celery_durable_beat.backends" in loaded  # the import really reached the factories
    assert not loaded & ROUND, sorted(loaded & ROUND)
