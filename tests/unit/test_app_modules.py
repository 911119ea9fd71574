"""The app's modules are loaded as Celery loads them before the config is read (SPEC §16).

Celery's Django fixup sets Django up when the loader sends ``import_modules``; the CLI, ``check``,
config reading and manual runs send it through Celery's own ``import_default_modules``, once per
app, and not again where beat's or the worker's ``init_worker`` already did.
``tests/integration/test_django_project.py`` runs every verb on a real ``django-db`` project.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery, signals

from celery_durable_beat import DurableBeat
from celery_durable_beat.celery_config import load_app_modules
from celery_durable_beat.control.check import check_config
from celery_durable_beat.publish.capturing import CapturingPublisher
from celery_durable_beat.testing import FrozenBeat

pytestmark = pytest.mark.unit


@pytest.fixture
def app() -> Iterator[Celery]:
    made = Celery("modules", broker="memory://", set_as_current=False)
    made.conf.result_backend = "cache+memory://"  # read by default_entries (cleanup or not)
    made.conf.beat_schedule = {"n": {"task": "t", "schedule": "0 9 * * *"}}
    yield made
    made.close()


@pytest.fixture
def seen(app: Celery) -> Iterator[list[Any]]:
    """Every ``import_modules`` sent for ``app``, as Django's fixup would receive it."""
    found: list[Any] = []

    def receiver(sender: Any, **_: Any) -> None:
        found.append(sender)

    signals.import_modules.connect(receiver, sender=app, weak=False)
    yield found
    signals.import_modules.disconnect(receiver, sender=app)


def test_check_and_frozen_beat_send_import_modules_once_per_app(
    app: Celery, seen: list[Any]
) -> None:
    assert check_config(app).ok
    check_config(app)
    with FrozenBeat(app, start="2026-01-10T12:00:00Z"):
        pass
    assert seen == [app]


def test_a_worker_or_beat_that_ran_init_worker_is_not_loaded_again(
    app: Celery, seen: list[Any]
) -> None:
    app.loader.init_worker()  # what celery beat and celery worker do at start
    load_app_modules(app)
    check_config(app)
    assert seen == [app]


def test_a_manual_run_loads_the_modules_before_its_publisher(
    app: Celery, seen: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Celery's ``send_task`` tells the result backend about each task: a ``django-db`` one
    needs Django set up before the publisher exists."""
    beat = DurableBeat(app)
    assert seen == []  # constructing one stays free
    loaded_first: list[bool] = []

    def make_publisher(*_: Any) -> CapturingPublisher:
        loaded_first.append(seen == [app])
        return CapturingPublisher()

    monkeypatch.setattr("celery_durable_beat.control.api.make_publisher", make_publisher)
    assert isinstance(beat.publisher, CapturingPublisher)
    assert loaded_first == [True]
