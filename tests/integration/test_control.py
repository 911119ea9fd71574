"""The Python control API (``DurableBeat``) on a real, empty database: it builds its store from
the app's settings and creates the schema on first use. Everything else it does is tested on the
in-memory store in ``tests/unit/test_control.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery

from celery_durable_beat import DurableBeat

pytestmark = pytest.mark.integration


def make_app(url: str, beat_schedule: dict[str, Any] | None = None) -> Celery:
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(
        timezone="Europe/Berlin", durable_beat_url=url, beat_schedule=beat_schedule or {}
    )
    return app


def test_schema_is_created_on_first_use(store_url: str) -> None:
    with DurableBeat(make_app(store_url)) as fresh:
        assert fresh.list() == []
        assert fresh.migrate()
