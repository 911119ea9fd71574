"""SPEC §2's bounds against a real store: a refused definition writes nothing, and one exactly
at every bound (a 200-character name, a year-9999 end, a 100-year interval, kwargs 32 deep)
is stored and read back by ``list`` and ``show`` on SQLite and PostgreSQL alike."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from celery import Celery

from celery_durable_beat import DurableBeat
from celery_durable_beat.exceptions import ConfigError
from celery_durable_beat.schedules.bounds import ARGS_DEPTH_MAX, NAME_MAX, SECONDS_MAX

pytestmark = pytest.mark.integration


def _app(url: str) -> Celery:
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(timezone="Europe/Berlin", durable_beat_url=url, beat_schedule={})
    return app


def _nested(depth: int) -> Any:
    value: Any = {"leaf": "{{scheduled_for}}"}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def test_a_definition_at_every_bound_is_stored_and_read_back(store_url: str) -> None:
    name = "b" * NAME_MAX
    entry = {
        "task": "proj.t",
        "schedule": timedelta(seconds=SECONDS_MAX),
        "end_at": "9999-12-31T23:59:59+00:00",
        "kwargs": _nested(ARGS_DEPTH_MAX),
        "jitter": SECONDS_MAX,
        "expires": SECONDS_MAX,
    }
    with DurableBeat(_app(store_url)) as beat:
        assert beat.upsert(name, entry) == "created"
        (view,) = beat.list()
        assert view.name == name and view.next_tick is not None
        shown = beat.get(name, count=100)
        assert shown.end_at is not None and shown.end_at.startswith("9999-12-31")
        assert shown.definition.kwargs == _nested(ARGS_DEPTH_MAX)
        assert len(shown.next) == 80  # 2070 .. 9970: the next would pass year 9999
        assert beat.upsert(name, entry) == "unchanged"


def test_a_refused_definition_writes_nothing(store_url: str) -> None:
    with DurableBeat(_app(store_url)) as beat:
        with pytest.raises(ConfigError, match="nests deeper than 32 levels"):
            beat.upsert("deep", {"task": "t", "schedule": "@every 1h", "args": [_nested(900)]})
        with pytest.raises(ConfigError, match='ends in "/pause"'):
            beat.upsert("x/pause", {"task": "t", "schedule": "@every 1h"})
        assert beat.list() == []
