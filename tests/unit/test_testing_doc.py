"""docs/testing.md's example runs as written, so its numbers cannot drift from what FrozenBeat
does (it once said ``[8, 8, 7]`` for a DST week that gives ``[8, 7, 7]``)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from celery import Celery

pytestmark = pytest.mark.unit

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
SCHEDULE = {"digest": {"task": "proj.digest", "schedule": "0 3 * * *", "tz": "America/New_York"}}
"""The ``beat_schedule`` the doc's prose gives ``proj``."""


def _first_python_block(text: str) -> str:
    found = re.search(r"```python\n(.*?)```", text, re.DOTALL)
    assert found, "docs/testing.md has no python example"
    return found.group(1)


def test_the_frozen_beat_example_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    app = Celery("proj", set_as_current=False)
    app.conf.beat_schedule = SCHEDULE
    package, module = ModuleType("proj"), ModuleType("proj.celery")
    module.__dict__["app"] = app
    monkeypatch.setitem(sys.modules, "proj", package)
    monkeypatch.setitem(sys.modules, "proj.celery", module)
    namespace: dict[str, Any] = {}
    exec(_first_python_block(DOC.read_text()), namespace)  # our own doc, run as a reader would
    tests = [value for name, value in namespace.items() if name.startswith("test_")]
    assert tests, "the example defines no test"
    for test in tests:
        test()
