"""The Celery edge of config: crontab/schedule objects, refused classes, settings."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta, timezone

import pytest
from celery import Celery
from celery.beat import BeatLazyFunc
from celery.schedules import crontab, schedule, solar

from celery_durable_beat.celery_config import definitions_from_app
from celery_durable_beat.control.check import check_config
from celery_durable_beat.exceptions import ConfigError
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.model import MissedPolicy, Reason
from celery_durable_beat.policy import plan_schedule
from celery_durable_beat.schedules.occurrences import next_tick
from celery_durable_beat.schedules.solar import SolarSpec
from celery_durable_beat.schedules.spec import CronSpec, IntervalSpec
from celery_durable_beat.settings import Settings

pytestmark = pytest.mark.unit


def _definitions(entries: dict[str, dict[str, object]], tz: str = "Europe/Berlin") -> list:  # type: ignore[type-arg]
    app = Celery("edge", set_as_current=False)
    app.conf.timezone = tz
    app.conf.beat_schedule = entries
    return definitions_from_app(app, Settings.from_conf(app.conf, environ={}))


def test_crontab_fields_are_read_in_the_app_zone() -> None:
    (d,) = _definitions({"n": {"task": "t", "schedule": crontab(minute=0, hour=3)}})
    assert d.spec == CronSpec(("0", "3", "*", "*", "*"), "Europe/Berlin")
    first = next_tick(d.spec, 1_782_864_000_000)  # 2026-07-01T00:00:00Z
    assert datetime.fromtimestamp(first / 1000, timezone.utc).hour == 1  # 03:00 CEST


def test_crontab_ranges_names_and_lists_survive() -> None:
    (d,) = _definitions(
        {
            "w": {
                "task": "t",
                "tz": "America/New_York",
                "schedule": crontab(minute=[0, 30], hour="9-17", day_of_week="mon-fri"),
            }
        }
    )
    assert d.spec == CronSpec(("0,30", "9-17", "*", "*", "mon-fri"), "America/New_York")


def test_celery_schedule_is_an_epoch_aligned_interval() -> None:
    (d,) = _definitions({"i": {"task": "t", "schedule": schedule(timedelta(seconds=30))}})
    assert d.spec == IntervalSpec(30_000)
    assert d.tz == "UTC"


def test_solar_is_read_and_a_class_without_next_after_is_refused_beside_other_problems() -> None:
    """SPEC §18: Celery's ``solar`` is a schedule kind; a custom class (here a ``schedule``
    subclass with its own ``is_due``) needs ``next_after``, and its refusal is one problem among
    all the others, not the first one only."""

    class EveryFullMoon(schedule):  # a custom schedule class of the user's
        def is_due(self, last_run_at: datetime) -> tuple[bool, float]:
            return False, 60.0

    sun = {"sun": {"task": "t", "schedule": solar("sunset", 59.437, 24.745)}}
    (read,) = _definitions(sun)
    assert read.spec == SolarSpec("sunset", 59.437, 24.745, "Europe/Berlin")
    with pytest.raises(ConfigError) as caught:
        _definitions(
            {
                **sun,
                "moon": {"task": "t", "schedule": EveryFullMoon(timedelta(days=29))},
                "typo": {"task": "t", "schedule": "@every 5s", "missd": "skip"},
            }
        )
    text = str(caught.value)
    assert "EveryFullMoon is a custom schedule class without a next_after() method" in text
    assert 'schedule "typo": unknown key "missd"' in text
    assert len(caught.value.problems) == 2


def test_relative_is_refused_on_schedule_as_on_the_entry_key() -> None:
    """Stock beat accepts ``schedule(..., relative=True)`` (it rounds the first run to the
    interval); durable beat aligns intervals to the epoch, so it refuses both spellings with the
    same reason (SPEC §14), never ignoring one in silence."""
    stock = schedule(timedelta(seconds=30), relative=True)
    assert stock.relative  # what a stock beat user wrote, accepted by Celery
    with pytest.raises(ConfigError) as on_schedule:
        _definitions({"r": {"task": "t", "schedule": stock}})
    with pytest.raises(ConfigError) as on_entry:
        _definitions({"r": {"task": "t", "schedule": 30, "relative": True}})
    assert "relative=True is not supported" in str(on_schedule.value)
    assert on_schedule.value.problems[0].problem == on_entry.value.problems[0].problem


@pytest.mark.parametrize(
    ("value", "fix"),
    [
        (BeatLazyFunc(lambda: 1), "use the {{scheduled_for}} or {{scheduled_for_ms}} placeholder"),
        (datetime(2026, 12, 1, tzinfo=timezone.utc), "use an ISO 8601 string"),
    ],
    ids=["BeatLazyFunc", "datetime"],
)
def test_what_stock_beat_evaluates_in_args_is_refused_with_its_replacement(
    value: object, fix: str
) -> None:
    """Stock beat calls a ``BeatLazyFunc`` in args at each tick and pickles datetimes; neither
    can be stored, so the refusal names what to write instead (SPEC §14)."""
    with pytest.raises(ConfigError) as caught:
        _definitions({"l": {"task": "t", "schedule": 60, "args": [value]}})
    (problem,) = caught.value.problems
    assert problem.field == "args" and fix in problem.problem
    assert f"a {type(value).__name__}" in problem.problem


def test_non_schedule_objects_are_refused() -> None:
    class Weird:
        def is_due(self) -> None: ...
        def remaining_estimate(self) -> None: ...

    with pytest.raises(ConfigError, match="Weird is a custom schedule class"):
        _definitions({"x": {"task": "t", "schedule": Weird()}})


def test_default_missed_policy_comes_from_settings() -> None:
    app = Celery("edge", set_as_current=False)
    app.conf.beat_schedule = {"a": {"task": "t", "schedule": 60}}
    app.conf.durable_beat_default_missed = "backfill"
    (d,) = definitions_from_app(app, Settings.from_conf(app.conf, environ={}))
    assert d.missed is MissedPolicy.BACKFILL


def test_url_from_the_environment_wins() -> None:
    app = Celery("edge", set_as_current=False)
    app.conf.durable_beat_url = "sqlite:///from-conf.sqlite3"
    env = {"DURABLE_BEAT_URL": "postgresql://beat@db/beat"}
    assert Settings.from_conf(app.conf, environ=env).url == "postgresql://beat@db/beat"
    assert Settings.from_conf(app.conf, environ={}).url == "sqlite:///from-conf.sqlite3"


def test_beat_schedule_must_be_a_dict() -> None:
    app = Celery("edge", set_as_current=False)
    app.conf.beat_schedule = [("a", {})]
    with pytest.raises(ConfigError, match="is not a dict"):
        definitions_from_app(app, Settings.from_conf(app.conf, environ={}))


def test_a_bad_setting_is_named_as_the_setting_not_as_a_schedule() -> None:
    app = Celery("edge", set_as_current=False)
    app.conf.durable_beat_lease_ttl = -1
    with pytest.raises(ConfigError) as caught:
        Settings.from_conf(app.conf, environ={})
    (problem,) = caught.value.problems
    assert problem.field == "durable_beat_lease_ttl"
    assert str(problem) == "setting durable_beat_lease_ttl = -1: Input should be greater than 0"


def test_a_lease_beat_cannot_use_is_named_as_the_setting() -> None:
    """A store without a lease row and no lease URL: the refusal names the lease setting."""
    from celery_durable_beat.backends import make_lease
    from celery_durable_beat.store.memory import MemoryStore

    with pytest.raises(ConfigError) as caught:
        make_lease(Settings.from_conf({}, environ={}), MemoryStore())
    (problem,) = caught.value.problems
    assert problem.field == "durable_beat_lease_url"
    assert str(problem).startswith("setting durable_beat_lease_url: the store MemoryStore has no")
    assert 'schedule "' not in str(caught.value)


def test_a_bad_app_timezone_is_one_problem_not_one_per_entry() -> None:
    entries = {name: {"task": "t", "schedule": "0 3 * * *"} for name in ("a", "b", "c")}
    entries["d"] = {"task": "t", "schedule": "0 3 * * *", "missed": "never"}
    with pytest.raises(ConfigError) as caught:
        _definitions(entries, tz="Mars/Base")
    zone, entry = caught.value.problems  # the entry's own problem is still reported
    assert zone.field == "timezone"
    assert str(zone).startswith('setting timezone "Mars/Base" is not an IANA zone; use e.g. "')
    assert entry.entry == "d" and entry.field == "missed"


def test_args_none_means_no_arguments_like_stock_celery() -> None:
    (d,) = _definitions({"n": {"task": "t", "schedule": "@every 1s", "args": None}})
    assert d.args == ()


def _stock_is_due(app: Celery, now: datetime, last_run_at: datetime) -> bool:
    """Stock beat's decision for ``crontab(minute=0, hour=3)`` at ``now`` (Celery's reference)."""
    stock = crontab(minute=0, hour=3, app=app, nowfun=lambda: now)
    return bool(stock.is_due(last_run_at)[0])


def test_beat_cron_starting_deadline_skips_what_stock_beat_skips() -> None:
    """SPEC §14: ``beat_cron_starting_deadline`` is the ``max_lateness`` of cron entries that
    set none; an occurrence 75 s late with a 60 s deadline is skipped by both, one 45 s late
    fired by both."""
    app = Celery("deadline", set_as_current=False)
    app.conf.update(timezone="UTC", beat_cron_starting_deadline=60)
    app.conf.beat_schedule = {
        "cron": {"task": "t", "schedule": crontab(minute=0, hour=3)},
        "own": {"task": "t", "schedule": "0 3 * * *", "max_lateness": 600},
        "interval": {"task": "t", "schedule": 60},
    }
    by_name = {d.name: d for d in definitions_from_app(app, Settings.from_conf(app.conf, {}))}
    assert by_name["cron"].max_lateness == 60
    assert by_name["own"].max_lateness == 600  # an entry's own setting wins
    assert by_name["interval"].max_lateness is None  # stock applies it to crontabs only
    (advice,) = [a for a in check_config(app).recommendations if "cron_starting" in a]
    assert advice.startswith("beat_cron_starting_deadline = 60 is read as max_lateness = 60")
    due = datetime(2026, 12, 1, 3, 0, tzinfo=timezone.utc)
    last = due - timedelta(days=1)
    for late_s, fires in ((45, True), (75, False)):
        now = due + timedelta(seconds=late_s)
        assert _stock_is_due(app, now, last) is fires
        planned = plan_schedule(
            "cron", by_name["cron"], int(due.timestamp() * 1000), int(now.timestamp() * 1000)
        )
        assert bool(planned.fire) is fires
        assert [d.reason for d in planned.dropped] == ([] if fires else [Reason.TOO_LATE])


def test_enable_utc_off_without_a_timezone_reads_crontabs_in_the_hosts_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Stock beat then reads a crontab in the host's local time (SPEC §14): 03:00 on an IST host
    is 21:30 UTC, and ``check`` names the zone."""
    import time

    import tzlocal

    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    tzlocal.reload_localzone()
    try:
        app = Celery("local", set_as_current=False)
        app.conf.update(enable_utc=False, timezone=None)
        app.conf.beat_schedule = {"n": {"task": "t", "schedule": crontab(minute=0, hour=3)}}
        (d,) = definitions_from_app(app, Settings.from_conf(app.conf, environ={}))
        assert d.spec == CronSpec(("0", "3", "*", "*", "*"), "Asia/Kolkata")
        stock_offset = datetime(2026, 12, 1, tzinfo=app.timezone).utcoffset()
        assert stock_offset == timedelta(hours=5, minutes=30)  # stock's zone: the host's
        first = next_tick(d.spec, 1_796_083_200_000)  # 2026-12-01T00:00:00Z
        assert datetime.fromtimestamp(first / 1000, timezone.utc).strftime("%H:%M") == "21:30"
        (advice,) = [a for a in check_config(app).recommendations if "enable_utc" in a]
        assert "Asia/Kolkata" in advice and "set timezone = 'Asia/Kolkata'" in advice
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
        tzlocal.reload_localzone()


def test_add_periodic_task_entries_are_schedules_named_or_not() -> None:
    """The pattern Celery's docs teach (SPEC §14): ``add_periodic_task`` in
    ``on_after_configure`` or ``on_after_finalize``; an unnamed entry is named
    ``repr(signature)`` by Celery, a stable name whose ids respect the 155-character bound."""
    app = Celery("periodic", set_as_current=False)

    @app.task(name="proj.report")
    def report(region: str, detail: str = "") -> None: ...

    def configured(sender: Celery, **_: object) -> None:
        sender.add_periodic_task(10.0, report.s("emea"))
        sender.add_periodic_task(crontab(minute=0, hour=3), report.s("apac"), name="nightly apac")

    def finalized(sender: Celery, **_: object) -> None:
        sender.add_periodic_task(60.0, report.s("amer", detail="x" * 300))

    app.on_after_configure.connect(configured, weak=False)
    app.on_after_finalize.connect(finalized, weak=False)
    app.finalize()
    by_name = {d.name: d for d in definitions_from_app(app, Settings.from_conf(app.conf, {}))}
    assert by_name["proj.report('emea')"].spec == IntervalSpec(10_000)
    assert by_name["nightly apac"].spec == CronSpec(("0", "3", "*", "*", "*"), "UTC")
    (long_name,) = [n for n in by_name if n.startswith("proj.report('amer'")]
    celerys = repr(report.s("amer", detail="x" * 300))  # 300+ characters: over the 200 a name has
    digest = hashlib.sha1(celerys.encode()).hexdigest()[:8]
    assert long_name == f"{celerys[:191]}-{digest}" and len(long_name) == 200
    assert by_name[long_name].kwargs == {"detail": "x" * 300}
    assert len(tick_task_id(long_name, 1_796_083_200_000)) <= 155


def test_a_name_the_user_wrote_too_long_is_still_refused() -> None:
    with pytest.raises(ConfigError, match="at most 200 characters"):
        _definitions({"n" * 201: {"task": "t", "schedule": 60}})


def test_check_says_what_it_ignores_of_stock_beats_timing_settings() -> None:
    app = Celery("stock-settings", set_as_current=False)
    app.conf.update(
        beat_schedule_filename="/var/run/celery/celerybeat-schedule",
        beat_max_loop_interval=300,
        durable_beat_poll_interval=1.0,
    )
    advice = check_config(app).recommendations
    (shelf,) = [a for a in advice if a.startswith("beat_schedule_filename")]
    assert "is ignored" in shelf and "durable_beat_url" in shelf
    assert any(a.startswith("beat_max_loop_interval = 300 has no effect") for a in advice)
    app.conf.update(beat_schedule_filename="celerybeat-schedule", beat_max_loop_interval=0.5)
    assert not [a for a in check_config(app).recommendations if a.startswith("beat_")]


def test_the_registered_alias_durable_selects_the_scheduler() -> None:
    """``celery beat -S durable`` (the ``celery.beat_schedulers`` entry point), as docs say."""
    from celery.beat import Service

    from celery_durable_beat.scheduler import Scheduler

    app = Celery("alias", set_as_current=False)
    scheduler = Service(app, scheduler_cls="durable").get_scheduler(lazy=True)
    assert type(scheduler) is Scheduler
