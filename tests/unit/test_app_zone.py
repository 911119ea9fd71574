"""The app's zone is Celery's (SPEC §14, §16): ``zone_in_force`` against ``app.timezone``.

Each case configures a Celery app one way a project does it and checks three things: the zone
we read equals the one Celery's ``app.timezone`` resolves, its source names the setting as
written, and (for the Django-shaped config, the one that used to differ) the instants our
FrozenBeat and ``DurableBeat.next_ticks`` plan equal stock beat's, in winter and across both
New York DST changes. Django's settings appear as ``django.conf.UserSettingsHolder``, the object
``django.conf.settings`` wraps, so no process-wide Django state is touched.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.schedules import crontab

from celery_durable_beat import DurableBeat
from celery_durable_beat.celery_config import definitions_from_app, zone_in_force
from celery_durable_beat.control.check import check_config
from celery_durable_beat.settings import Settings
from celery_durable_beat.testing import FrozenBeat
from tests.support import stock_beat

pytestmark = pytest.mark.unit

NEW_YORK = "America/New_York"
AFTERS = {
    "winter": datetime(2026, 1, 10, 12, 0, tzinfo=timezone.utc),
    "spring forward (2026-03-08)": datetime(2026, 3, 6, 12, 0, tzinfo=timezone.utc),
    "fall back (2026-11-01)": datetime(2026, 10, 30, 12, 0, tzinfo=timezone.utc),
}
"""Where each look-ahead starts: the DST ones two days before the change."""


class ConfigModule:
    """A config object of the kind ``config_from_object`` is given (a module, a class)."""

    def __init__(self, **settings: Any) -> None:
        self.__dict__.update(settings)


def django_settings(**settings: Any) -> Any:
    """Django's settings object (``django.conf.settings`` wraps one), Django's defaults under."""
    conf = pytest.importorskip("django.conf")
    holder = conf.UserSettingsHolder(conf.global_settings)
    for name, value in settings.items():
        setattr(holder, name, value)
    return holder


def app_of(source: Any = None, namespace: str | None = None, **conf: Any) -> Celery:
    app = Celery("zone", set_as_current=False)
    if source is not None:
        app.config_from_object(source, namespace=namespace)
    app.conf.update(conf)
    return app


def _stock_name(app: Celery) -> str:
    zone = app.timezone
    return str(getattr(zone, "key", zone))


@pytest.mark.parametrize(
    ("make", "name", "source"),
    [
        (app_of, "UTC", "default"),
        (lambda: app_of(timezone="Europe/Berlin"), "Europe/Berlin", "timezone"),
        (lambda: app_of(timezone=ZoneInfo("Asia/Tokyo")), "Asia/Tokyo", "timezone"),
        (
            lambda: app_of(ConfigModule(CELERY_TIMEZONE="Europe/Paris"), "CELERY"),
            "Europe/Paris",
            "CELERY_TIMEZONE",
        ),
        (
            lambda: app_of(django_settings(TIME_ZONE=NEW_YORK), "CELERY"),
            NEW_YORK,
            "Django TIME_ZONE",
        ),
        (  # Django's own default zone when the project sets none, as Celery reads it
            lambda: app_of(django_settings(), "CELERY"),
            "America/Chicago",
            "Django TIME_ZONE",
        ),
        (
            lambda: app_of(
                django_settings(TIME_ZONE=NEW_YORK, CELERY_TIMEZONE="Europe/Rome"), "CELERY"
            ),
            "Europe/Rome",
            "CELERY_TIMEZONE",
        ),
        (  # an old-style config module, no namespace: Celery still maps CELERY_TIMEZONE
            lambda: app_of(ConfigModule(CELERY_TIMEZONE="Europe/Oslo", BROKER_URL="memory://")),
            "Europe/Oslo",
            "CELERY_TIMEZONE",
        ),
        (  # a TIME_ZONE outside Django counts too (Celery's rule), named as written
            lambda: app_of(ConfigModule(TIME_ZONE="Europe/Madrid")),
            "Europe/Madrid",
            "TIME_ZONE",
        ),
        (  # an empty timezone wins over TIME_ZONE and falls back, exactly as in Celery
            lambda: app_of(django_settings(TIME_ZONE=NEW_YORK, CELERY_TIMEZONE=""), "CELERY"),
            "UTC",
            "default",
        ),
    ],
)
def test_the_zone_and_its_source_are_celerys(make: Any, name: str, source: str) -> None:
    app = make()
    zone = zone_in_force(app)
    assert (zone.name, zone.source, zone.host) == (name, source, False)
    assert zone.name == _stock_name(app)  # what stock beat's crontabs are read in


@pytest.fixture
def host_in_kolkata(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    import tzlocal

    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    tzlocal.reload_localzone()
    yield
    monkeypatch.delenv("TZ")
    time.tzset()
    tzlocal.reload_localzone()


@pytest.mark.usefixtures("host_in_kolkata")
@pytest.mark.parametrize(
    ("app_maker", "utc_name", "tz_name"),
    [
        (lambda: app_of(enable_utc=False), "enable_utc", "timezone"),
        (
            lambda: app_of(ConfigModule(CELERY_ENABLE_UTC=False), "CELERY"),
            "CELERY_ENABLE_UTC",
            "CELERY_TIMEZONE",
        ),
    ],
)
def test_enable_utc_off_without_a_zone_is_the_hosts_named_as_written(
    app_maker: Any, utc_name: str, tz_name: str
) -> None:
    app = app_maker()
    zone = zone_in_force(app)
    assert (zone.name, zone.source, zone.host) == (
        "Asia/Kolkata",
        f"host zone ({utc_name} = False)",
        True,
    )
    assert datetime(2026, 12, 1, tzinfo=app.timezone).utcoffset() == ZoneInfo(
        "Asia/Kolkata"
    ).utcoffset(datetime(2026, 12, 1))
    checked = check_config(app)
    assert str(checked.zone) == f"Asia/Kolkata (host zone ({utc_name} = False))"
    (advice,) = [a for a in checked.recommendations if "host's zone" in a]
    assert advice.startswith(f"{utc_name} = False without {tz_name}: ")
    assert f"set {tz_name} = 'Asia/Kolkata'" in advice


def test_a_bad_django_time_zone_is_named_as_the_setting_that_holds_it() -> None:
    app = app_of(django_settings(TIME_ZONE="New_York"), "CELERY")
    app.conf.beat_schedule = {"n": {"task": "t", "schedule": "0 9 * * *"}}
    checked = check_config(app)
    (problem,) = checked.problems
    assert problem.field == "TIME_ZONE"
    assert (
        str(problem)
        == 'setting TIME_ZONE "New_York" is not an IANA zone; use e.g. "America/New_York"'
    )


def _django_app() -> Celery:
    """A Django-shaped app: TIME_ZONE only, both spellings of "09:00 every day"."""
    schedule = {
        "morning-cron": {"task": "proj.report", "schedule": "0 9 * * *"},
        "morning-crontab": {"task": "proj.report", "schedule": crontab(hour=9, minute=0)},
    }
    settings = django_settings(TIME_ZONE=NEW_YORK, USE_TZ=True, CELERY_BEAT_SCHEDULE=schedule)
    return app_of(settings, "CELERY", broker_url="memory://")


@pytest.mark.parametrize("after", list(AFTERS.values()), ids=list(AFTERS))
def test_a_django_projects_ticks_are_stock_beats_instant_for_instant(after: datetime) -> None:
    app = _django_app()
    stock = stock_beat.fires(stock_beat.entry_schedule(app, "morning-crontab"), after, 4)
    definitions = definitions_from_app(app, Settings.from_conf(app.conf, environ={}))
    assert {d.tz for d in definitions} == {NEW_YORK}
    with FrozenBeat(app, start=after) as frozen:
        control = DurableBeat(app, store=frozen.store)
        for name in ("morning-cron", "morning-crontab"):
            planned = [t.tick_ms for t in control.next_ticks(name, 4, after=after)]
            assert planned == stock, name
        ran = frozen.advance("4d")
    for name in ("morning-cron", "morning-crontab"):
        assert [t.tick_ms for t in ran if t.schedule == name] == stock, name
    local = [datetime.fromtimestamp(ms / 1000, ZoneInfo(NEW_YORK)) for ms in stock]
    assert {(t.hour, t.minute) for t in local} == {(9, 0)}
