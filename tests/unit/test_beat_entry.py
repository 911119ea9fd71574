"""What an integration that wraps stock beat's ``apply_entry`` is given (SPEC §17): the tick's
``ScheduleEntry``, its Celery schedule beside the one stock beat holds for the same entry (read
by Sentry's own ``_get_monitor_config``, so the monitor is configured alike), and how a wrapper
is told from Celery's own method (a plain function, ``functools.wraps``, a ``wrapt`` proxy as
Datadog's tracer installs).

The routing itself, on a real broker, is ``tests/integration/test_beat_wrappers.py``; Sentry and
OpenTelemetry in real beat and worker processes are ``tests/integration/test_observed_ticks.py``.
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import wrapt
from celery import Celery, beat
from celery.app.task import Task
from celery.schedules import crontab, schedule
from kombu.messaging import Producer
from sentry_sdk.integrations.celery.beat import (
    _apply_crons_data_to_schedule_entry,
    _get_monitor_config,
)

from celery_durable_beat.message import build_message
from celery_durable_beat.model import Definition
from celery_durable_beat.publish.beat_entry import NoCeleryEquivalent, beat_entry, celery_schedule
from celery_durable_beat.publish.redis_template import templating_refused
from celery_durable_beat.publish.send_task import own_apply_async
from celery_durable_beat.publish.wrappers import beat_wrappers, celery_own, who
from celery_durable_beat.schedules.spec import AtSpec, CronSpec, IntervalSpec, parse_schedule

pytestmark = pytest.mark.unit


@pytest.fixture
def app() -> Celery:
    app = Celery("entries", set_as_current=False)
    app.conf.timezone = "America/New_York"
    return app


def _cron(text: str, tz: str = "America/New_York") -> CronSpec:
    spec = parse_schedule(text, tz).spec
    assert isinstance(spec, CronSpec)
    return spec


def test_a_cron_spec_is_the_crontab_stock_beat_holds_in_the_schedules_zone(app: Celery) -> None:
    ours = celery_schedule(_cron("0 4 * * 1-5"), app)
    stock = crontab(minute="0", hour="4", day_of_week="1-5", app=app)
    assert isinstance(ours, crontab)
    assert ours == stock  # the same expanded fields
    assert ours.tz == ZoneInfo("America/New_York")
    expected = {
        "schedule": {"type": "crontab", "value": "0 4 * * 1-5"},
        "timezone": "America/New_York",
    }
    assert _get_monitor_config(stock, app, "nightly") == expected
    assert _get_monitor_config(ours, app, "nightly") == expected


def test_a_cron_in_a_zone_of_its_own_reports_that_zone(app: Celery) -> None:
    ours = celery_schedule(_cron("30 9 1 * *", tz="Europe/Berlin"), app)
    assert _get_monitor_config(ours, app, "monthly") == {
        "schedule": {"type": "crontab", "value": "30 9 1 * *"},
        "timezone": "Europe/Berlin",
    }


def test_seconds_field_zero_drops_to_five_fields_else_no_equivalent(app: Celery) -> None:
    assert celery_schedule(_cron("0 */5 * * * *"), app) == crontab(minute="*/5", app=app)
    other = celery_schedule(_cron("*/10 * * * * *"), app)
    assert isinstance(other, NoCeleryEquivalent)
    assert other.text == "*/10 * * * * *"


@pytest.mark.parametrize("text", ["0 9 L * *", "0 9 * * 5#2", "0 9 * * 7"])
def test_fields_celery_cannot_parse_have_no_equivalent(app: Celery, text: str) -> None:
    found = celery_schedule(_cron(text), app)
    assert isinstance(found, NoCeleryEquivalent)
    assert _get_monitor_config(found, app, "x") == {}  # Sentry: unsupported, no check-in


def test_an_interval_is_a_schedule_in_the_apps_zone_as_stock_beats(app: Celery) -> None:
    ours = celery_schedule(IntervalSpec(300_000), app)
    stock = schedule(timedelta(minutes=5), app=app)
    assert isinstance(ours, schedule) and ours.run_every == stock.run_every
    expected = {
        "schedule": {"type": "interval", "value": 5, "unit": "minute"},
        "timezone": "America/New_York",
    }
    assert _get_monitor_config(ours, app, "five") == _get_monitor_config(stock, app, "five")
    assert _get_monitor_config(ours, app, "five") == expected


def test_a_one_off_has_no_equivalent(app: Celery) -> None:
    found = celery_schedule(AtSpec(1_780_000_000_000, "UTC"), app)
    assert isinstance(found, NoCeleryEquivalent)
    assert "@at" in repr(found)


def test_the_entry_is_the_ticks_and_a_copy(app: Celery) -> None:
    definition = Definition(
        name="Nightly Report",
        task="reports.nightly",
        spec=_cron("0 4 * * *"),
        args=({"region": "emea"},),
        kwargs={"detail": [1, 2]},
        options={"queue": "reports", "headers": {"tenant": "acme"}},
    )
    message = build_message("Nightly Report", definition, 1_780_000_000_000, "nightly-report@x")
    entry = beat_entry(app, message)
    assert (entry.name, entry.task) == ("Nightly Report", "reports.nightly")
    assert entry.args == ({"region": "emea"},) and entry.kwargs == {"detail": [1, 2]}
    assert entry.options == {"queue": "reports", "headers": {"tenant": "acme"}}
    assert entry.schedule == crontab(minute="0", hour="4", app=app)
    assert entry.last_run_at == datetime.fromtimestamp(1_780_000_000, timezone.utc)
    entry.args[0]["region"] = "apac"
    entry.kwargs["detail"].append(3)
    entry.options["headers"]["tenant"] = "other"
    assert definition.args == ({"region": "emea"},) and definition.kwargs == {"detail": [1, 2]}
    assert definition.options["headers"] == {"tenant": "acme"}


def test_sentrys_slug_is_the_entry_name_as_under_stock_beat(app: Celery) -> None:
    """Sentry's own code on the entry we build and on stock beat's of the same name."""
    definition = Definition(name="nightly-report", task="t", spec=_cron("0 4 * * *"))
    ours = beat_entry(app, build_message("nightly-report", definition, 0, "id"))
    stock = beat.ScheduleEntry("nightly-report", "t", schedule=crontab("0", "4"), app=app)
    integration = SimpleNamespace(monitor_beat_tasks=True, exclude_beat_tasks=None)
    for entry in (ours, stock):  # no client initialised: the check-in itself goes nowhere
        _apply_crons_data_to_schedule_entry(SimpleNamespace(app=app), entry, integration)
    for key in ("sentry-monitor-slug", "sentry-monitor-config"):
        assert ours.options["headers"][key] == stock.options["headers"][key]
    assert ours.options["headers"]["sentry-monitor-slug"] == "nightly-report"


# -- telling a wrapper from Celery's own method --------------------------------------------------


def test_stock_beat_is_unwrapped() -> None:
    assert beat_wrappers() == {}
    assert celery_own(beat.Scheduler, "apply_entry") and celery_own(Celery, "send_task")


def test_a_plain_replacement_is_a_wrapper(monkeypatch: pytest.MonkeyPatch) -> None:
    def replacement(self: Any, entry: Any, producer: Any = None) -> None: ...

    monkeypatch.setattr(beat.Scheduler, "apply_entry", replacement)
    assert beat_wrappers() == {"apply_entry": f"{__name__}.{replacement.__qualname__}"}


def test_a_functools_wraps_wrapper_is_seen_through_its_copied_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = beat.Scheduler.apply_async

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **kwargs)

    monkeypatch.setattr(beat.Scheduler, "apply_async", wrapper)
    assert list(beat_wrappers()) == ["apply_async"]


def test_a_wrapt_proxy_is_a_wrapper(monkeypatch: pytest.MonkeyPatch) -> None:
    """Datadog's tracer wraps with ``wrapt``, whose proxy forwards ``__code__`` and the names."""
    monkeypatch.setattr(beat.Scheduler, "apply_entry", beat.Scheduler.__dict__["apply_entry"])

    def traced(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        return wrapped(*args, **kwargs)

    wrapt.wrap_function_wrapper("celery.beat", "Scheduler.apply_entry", traced)
    proxy = beat.Scheduler.__dict__["apply_entry"]
    assert proxy.__code__ is beat.Scheduler.apply_entry.__wrapped__.__code__  # forwarded
    assert beat_wrappers() == {"apply_entry": who(proxy)}
    assert who(proxy) == f"{__name__}.{traced.__qualname__}"


def test_a_wrapped_task_apply_async_is_called_as_stock_beat_calls_it(
    monkeypatch: pytest.MonkeyPatch, app: Celery
) -> None:
    @app.task(name="entries.plain")
    def plain() -> None: ...

    assert own_apply_async(app, "entries.plain") is None  # Celery's own: the fast path
    original = Task.apply_async

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **kwargs)

    monkeypatch.setattr(Task, "apply_async", wrapper)
    assert own_apply_async(app, "entries.plain") is app.tasks["entries.plain"]


@pytest.mark.parametrize(
    ("owner", "name", "why"),
    [
        (Celery, "send_task", "Celery.send_task is wrapped"),
        (Producer, "publish", "kombu's Producer.publish is wrapped"),
    ],
)
def test_a_wrapper_templated_ticks_would_skip_turns_templates_off(
    monkeypatch: pytest.MonkeyPatch, owner: type, name: str, why: str
) -> None:
    app = Celery("templates", broker="redis://127.0.0.1:1/0", set_as_current=False)
    assert templating_refused(app) is None
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapper)
    assert templating_refused(app) == why
