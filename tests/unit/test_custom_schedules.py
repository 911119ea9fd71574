"""Custom schedule classes (SPEC §18): a ``BaseSchedule`` subclass with ``next_after`` in
``beat_schedule``, its ticks from that method, stored as its class and ``repr()``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery
from celery.schedules import BaseSchedule

from celery_durable_beat import DurableBeat
from celery_durable_beat.celery_config import definitions_from_app, register_custom_schedules
from celery_durable_beat.exceptions import ConfigError, OccurrenceSearchError
from celery_durable_beat.publish.beat_entry import celery_schedule
from celery_durable_beat.schedules.custom import CustomSpec, next_custom_ms
from celery_durable_beat.schedules.occurrences import next_tick
from celery_durable_beat.settings import Settings
from celery_durable_beat.sync import sync_definitions
from celery_durable_beat.testing import FrozenBeat, MemoryStore

pytestmark = pytest.mark.unit

UTC = timezone.utc


class EveryOtherHour(BaseSchedule):  # type: ignore[misc]
    """At ``minute`` past every even UTC hour; ends at ``until`` when given."""

    def __init__(self, minute: int = 15, until: datetime | None = None) -> None:
        super().__init__()
        self.minute = minute
        self.until = until

    def next_after(self, instant: datetime) -> datetime | None:
        at = instant.astimezone(UTC).replace(minute=self.minute, second=0, microsecond=0)
        while at <= instant or at.hour % 2:
            at += timedelta(hours=1)
        return None if self.until is not None and at > self.until else at

    def __repr__(self) -> str:
        return f"EveryOtherHour(minute={self.minute})"


class Answers(BaseSchedule):  # type: ignore[misc]
    """Answers what it is told to, for the refusals."""

    def __init__(self, answer: Any, label: str) -> None:
        super().__init__()
        self.answer, self.label = answer, label

    def next_after(self, instant: datetime) -> Any:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer(instant) if callable(self.answer) else self.answer

    def __repr__(self) -> str:
        return f"Answers({self.label})"


class NoMethod(BaseSchedule):  # type: ignore[misc]
    def remaining_estimate(self, last_run_at: datetime) -> timedelta:
        return timedelta(hours=1)


def _app(schedule: dict[str, dict[str, Any]]) -> Celery:
    app = Celery("custom", set_as_current=False)
    app.conf.timezone = "Europe/Berlin"
    app.conf.beat_schedule = schedule
    return app


@pytest.fixture
def frozen() -> Iterator[list[FrozenBeat]]:
    made: list[FrozenBeat] = []
    yield made
    for beat in made:
        beat.close()


def _problems(app: Celery) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        definitions_from_app(app, Settings.from_conf(app.conf, environ={}))
    return [str(p) for p in caught.value.problems]


def test_ticks_come_from_next_after_and_the_definition_names_class_and_repr(
    frozen: list[FrozenBeat],
) -> None:
    app = _app({"even": {"task": "t", "schedule": EveryOtherHour(15)}})
    (definition,) = definitions_from_app(app, Settings.from_conf(app.conf, environ={}))
    assert definition.spec == CustomSpec(
        f"{__name__}:EveryOtherHour", "EveryOtherHour(minute=15)", "Europe/Berlin"
    )
    stored = definition.to_json()["schedule"]
    assert stored == {
        "kind": "custom",
        "class": f"{__name__}:EveryOtherHour",
        "repr": "EveryOtherHour(minute=15)",
        "tz": "Europe/Berlin",
    }
    beat = FrozenBeat(app, start="2026-12-04T03:00:00Z")
    frozen.append(beat)
    ticks = beat.advance("5h")
    assert [t.tick.isoformat() for t in ticks] == [
        "2026-12-04T04:15:00+00:00",
        "2026-12-04T06:15:00+00:00",
    ]
    assert ticks[0].task_id == "even@2026-12-04T04:15:00Z"
    assert isinstance(celery_schedule(definition.spec, app), EveryOtherHour)  # stock beat's own


def test_a_changed_repr_is_a_changed_definition_and_re_plans() -> None:
    store = MemoryStore()
    now = 1_780_000_000_000
    for minute, expected in ((15, "created"), (15, "unchanged"), (45, "updated")):
        app = _app({"even": {"task": "t", "schedule": EveryOtherHour(minute)}})
        definitions = definitions_from_app(app, Settings.from_conf(app.conf, environ={}))
        report = sync_definitions(store, definitions, now)
        assert getattr(report, expected) == ["even"], (minute, report)
    record = store.get("even")
    assert record is not None and record.next_tick_ms is not None
    assert datetime.fromtimestamp(record.next_tick_ms / 1000, UTC).minute == 45


def test_a_tick_is_the_answer_rounded_up_to_the_millisecond() -> None:
    spec = CustomSpec(f"{__name__}:Answers", "Answers(micro)")
    obj = Answers(lambda instant: instant + timedelta(microseconds=1500), "micro")
    app = _app({"micro": {"task": "t", "schedule": obj}})
    register_custom_schedules(app)
    assert next_custom_ms(spec, 1_000) == 1_002  # 1.0015 ms after 1 ms: 2.5 ms, rounded up
    assert next_tick(spec, 1_002) == 1_004  # asked again from the tick: strictly after it


@pytest.mark.parametrize(
    ("answer", "label", "says"),
    [
        (datetime(2030, 1, 1), "naive", "answered the naive 2030-01-01T00:00:00"),
        (datetime(2020, 1, 1, tzinfo=UTC), "past", "not after the instant it was asked about"),
        ("tomorrow", "text", "answered a str; answer an aware datetime or None"),
        (RuntimeError("no calendar"), "raises", "raised RuntimeError: no calendar"),
    ],
)
def test_check_refuses_a_next_after_that_answers_no_instant(
    answer: Any, label: str, says: str
) -> None:
    problems = _problems(_app({"odd": {"task": "t", "schedule": Answers(answer, label)}}))
    assert len(problems) == 1 and problems[0].startswith('schedule "odd": '), problems
    assert says in problems[0], problems


def test_check_refuses_a_class_without_next_after_naming_the_method() -> None:
    (problem,) = _problems(_app({"old": {"task": "t", "schedule": NoMethod()}}))
    assert problem.startswith(
        f'schedule "old": {__name__}:NoMethod is a custom schedule class without a '
        "next_after() method"
    ), problem
    assert "define next_after(self, instant: datetime) -> datetime | None" in problem


def test_a_class_failing_later_quarantines_its_schedule_alone(frozen: list[FrozenBeat]) -> None:
    limit = datetime(2026, 12, 4, 6, 30, tzinfo=UTC)

    def until_limit(instant: datetime) -> datetime:
        if instant >= limit:
            raise LookupError("no more calendar")
        return instant.replace(second=0, microsecond=0) + timedelta(minutes=30)

    app = _app(
        {
            "fragile": {"task": "t", "schedule": Answers(until_limit, "fragile")},
            "hourly": {"task": "t", "schedule": "0 * * * *", "tz": "UTC"},
        }
    )
    beat = FrozenBeat(app, start="2026-12-04T05:00:00Z")
    frozen.append(beat)
    ticks = beat.advance("3h")
    fired = {(t.schedule, t.tick.strftime("%H:%M")) for t in ticks}
    # 06:30 is never fired: the round plans a tick with the one after it (for the missed and
    # expires policies), which the class cannot give, so the schedule is quarantined instead
    assert {t for s, t in fired if s == "fragile"} == {"05:30", "06:00"}
    assert {("hourly", "06:00"), ("hourly", "07:00"), ("hourly", "08:00")} <= fired
    record = beat.store.get("fragile")
    assert record is not None and record.state.value == "quarantined"


def test_an_ended_custom_schedule_has_no_next_tick_and_stays_listed(
    frozen: list[FrozenBeat],
) -> None:
    until = datetime(2026, 12, 4, 8, 0, tzinfo=UTC)
    app = _app({"short": {"task": "t", "schedule": EveryOtherHour(15, until)}})
    beat = FrozenBeat(app, start="2026-12-04T03:00:00Z")
    frozen.append(beat)
    assert [t.tick.hour for t in beat.advance("1d")] == [4, 6]
    record = beat.store.get("short")
    assert record is not None and record.next_tick_ms is None


def test_a_process_without_the_config_says_where_the_ticks_come_from() -> None:
    spec = CustomSpec("elsewhere.schedules:Lunar", "Lunar(phase='full')")
    with pytest.raises(OccurrenceSearchError, match="is not loaded in this process"):
        next_tick(spec, 0)


def test_the_api_refuses_to_carry_a_custom_class() -> None:
    app = _app({})
    app.conf.durable_beat_url = "sqlite:///never-opened.sqlite3"
    with DurableBeat(app, store=MemoryStore()) as control, pytest.raises(ConfigError) as caught:
        control.upsert("adhoc", {"task": "t", "schedule": EveryOtherHour(15)})
    (problem,) = caught.value.problems
    assert "the API, the CLI and importers cannot carry it" in str(problem)
