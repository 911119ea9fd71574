"""SPEC §2 and §6 schedule keys on a frozen clock: ``start_at``/``end_at``, the ``expires``
instant, ``overlap: buffer_one`` and ``pause_on_failure`` in the round, and their validation.

The worker-facing sides (a real worker discarding expired ticks, a buffered tick surviving a
beat kill -9, failing runs pausing a schedule) are in ``tests/integration/test_schedule_features``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery

from celery_durable_beat.control.details import schedule_detail
from celery_durable_beat.control.views import schedule_view
from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.exceptions import ConfigError
from celery_durable_beat.gates.round_gate import RoundGate
from celery_durable_beat.message import TickMessage
from celery_durable_beat.model import Definition, Outcome, ScheduleState, Source, StateReason
from celery_durable_beat.policy import first_tick, plan
from celery_durable_beat.publish.capturing import CapturingPublisher
from celery_durable_beat.runs.base import RunKey, Runs, RunState, RunWrite
from celery_durable_beat.runs.memory import MemoryRuns
from celery_durable_beat.schedules.spec import IntervalSpec
from celery_durable_beat.schedules.validate import validate_entry
from celery_durable_beat.settings import Settings
from celery_durable_beat.store.memory import MemoryStore
from celery_durable_beat.sync import sync_definitions
from celery_durable_beat.testing import FrozenBeat

pytestmark = pytest.mark.unit

T0 = 1_780_000_000_000 // 3_600_000 * 3_600_000  # an hour boundary
HOUR = 3_600_000
SECOND = 1000


def _app(schedule: dict[str, dict[str, object]]) -> Celery:
    app = Celery("features", set_as_current=False)
    app.conf.beat_schedule = schedule
    return app


@pytest.fixture
def frozen() -> Iterator[Any]:
    made: list[FrozenBeat] = []

    def make(schedule: dict[str, dict[str, object]], start: str) -> FrozenBeat:
        beat = FrozenBeat(_app(schedule), start=start)
        made.append(beat)
        return beat

    yield make
    for beat in made:
        beat.close()


# -- validation -------------------------------------------------------------------------------
def _problems(entry: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        validate_entry("job", {"task": "t", "schedule": "@hourly", **entry})
    return {p.field: p.problem for p in caught.value.problems}


@pytest.mark.parametrize(
    ("entry", "field", "words"),
    [
        ({"start_at": "2026-12-01T00:00:00"}, "start_at", "has no UTC offset"),
        ({"end_at": datetime(2026, 12, 1)}, "end_at", "has no UTC offset"),
        ({"start_at": "next week"}, "start_at", "is not an ISO 8601 instant"),
        ({"start_at": 5}, "start_at", "is a int"),
        (
            {"start_at": "2026-12-02T00:00:00Z", "end_at": "2026-12-01T00:00:00Z"},
            "end_at",
            "is not after start_at",
        ),
        ({"expires": 0}, "expires", "is not positive"),
        ({"expires": "soon"}, "expires", 'is not "next_tick" or a number of seconds'),
        ({"expires": 30, "options": {"expires": 10}}, "expires", "is set twice"),
        ({"pause_on_failure": 0}, "pause_on_failure", "is not a whole number >= 1"),
        ({"pause_on_failure": True}, "pause_on_failure", "is not a whole number >= 1"),
        ({"require_worker": "yes"}, "require_worker", "is not true or false"),
    ],
)
def test_bad_values_are_named_with_a_fix(entry: dict[str, Any], field: str, words: str) -> None:
    problems = _problems(entry)
    assert words in problems[field]


def test_good_values_parse() -> None:
    berlin = timezone(timedelta(hours=1))
    d = validate_entry(
        "job",
        {
            "task": "t",
            "schedule": "@hourly",
            "start_at": "2026-12-01T00:00:00Z",
            "end_at": datetime(2027, 1, 1, tzinfo=berlin),
            "expires": timedelta(minutes=5),
            "pause_on_failure": 3,
            "require_worker": True,
            "overlap": "buffer_one",
        },
    )
    assert d.start_at_ms == 1_796_083_200_000
    assert d.end_at_ms == 1_798_758_000_000
    assert (d.expires, d.pause_on_failure, d.require_worker) == (300.0, 3, True)
    assert validate_entry("j", {"task": "t", "schedule": "@hourly", "expires": "next_tick"}).expires
    assert Definition.from_json("job", d.to_json()) == d


def test_a_definition_without_the_new_keys_keeps_its_stored_json_and_hash() -> None:
    """Upgrading must not make config sync see every existing schedule as changed."""
    d = validate_entry("job", {"task": "t", "schedule": "@hourly"})
    assert set(d.to_json()) == {
        "format",
        "task",
        "schedule",
        "args",
        "kwargs",
        "options",
        "missed",
        "backfill_max",
        "max_lateness",
        "overlap",
        "jitter",
        "enabled",
        "description",
    }


# -- start_at / end_at ------------------------------------------------------------------------
def test_first_tick_respects_start_and_end() -> None:
    spec = IntervalSpec(HOUR)
    bounded = Definition("b", "t", spec, start_at_ms=T0 + 5 * HOUR, end_at_ms=T0 + 7 * HOUR)
    assert first_tick(bounded, T0) == T0 + 5 * HOUR  # a tick exactly at start_at counts
    assert first_tick(bounded, T0 + 6 * HOUR + 1) == T0 + 7 * HOUR  # and one at end_at
    assert first_tick(bounded, T0 + 7 * HOUR) is None


def test_plan_never_fires_or_counts_ticks_after_the_end() -> None:
    spec = IntervalSpec(HOUR)
    done = plan(spec, T0, T0 + 10 * HOUR, _missed("backfill"), 10, end_ms=T0 + 3 * HOUR)
    assert done.fire == (T0, T0 + HOUR, T0 + 2 * HOUR, T0 + 3 * HOUR)
    assert done.next_tick_ms is None and done.dropped == ()
    skipped = plan(spec, T0, T0 + 10 * HOUR, _missed("skip"), end_ms=T0 + 3 * HOUR)
    assert skipped.fire == (T0 + 3 * HOUR,) and skipped.dropped_count == 3
    assert plan(spec, T0, T0, _missed("skip"), end_ms=T0 + HOUR).next_tick_ms == T0 + HOUR


def _missed(value: str) -> Any:
    from celery_durable_beat.model import MissedPolicy

    return MissedPolicy(value)


def test_frozen_beat_ticks_only_between_start_and_end(frozen: Any) -> None:
    beat = frozen(
        {
            "window": {
                "task": "t",
                "schedule": "@every 1h",
                "start_at": "2026-03-07T05:30:00+00:00",
                "end_at": "2026-03-07T09:00:00Z",
            }
        },
        "2026-03-07T00:00:00Z",
    )
    ticks = beat.advance("1d")
    assert [t.tick.hour for t in ticks] == [6, 7, 8, 9]
    record = beat.store.get("window")
    assert record.state is ScheduleState.ACTIVE and record.next_tick_ms is None
    view = schedule_view(record)
    assert view.next_tick is None and view.state == "active"  # listed, no new state
    assert (view.start_at, view.end_at) == (
        "2026-03-07T05:30:00+00:00",
        "2026-03-07T09:00:00+00:00",
    )
    detail = schedule_detail(
        record, now_ms=beat.store.now_ms(), count=5, after_ms=None, redact_keys=()
    )
    assert detail.next == () and detail.overdue is None
    assert detail.description == "every hour from 2026-03-07 05:30 until 2026-03-07 09:00"
    assert beat.advance("7d") == []


def test_an_outage_across_the_end_fires_only_ticks_up_to_it(frozen: Any) -> None:
    entry = {
        "task": "t",
        "schedule": "@hourly",
        "missed": "backfill",
        "end_at": "2026-03-07T03:00Z",
    }
    beat = frozen({"ending": entry}, "2026-03-07T00:00:00Z")
    beat.advance("6h", beat_running=False)
    assert [t.tick.hour for t in beat.advance("1s")] == [1, 2, 3]
    assert beat.store.get("ending").next_tick_ms is None


def test_a_schedule_declared_after_its_end_is_listed_with_no_next_tick() -> None:
    store = MemoryStore(clock=lambda: T0)
    gone = validate_entry(
        "gone", {"task": "t", "schedule": "@hourly", "end_at": "2020-01-01T00:00:00Z"}
    )
    sync_definitions(store, [gone], T0, epoch=0)
    record = store.get("gone")
    assert record is not None
    assert (record.state, record.next_tick_ms, record.next_due_ms) == (
        ScheduleState.ACTIVE,
        None,
        None,
    )


def test_moving_end_at_is_a_change_that_replans(frozen: Any) -> None:
    store = MemoryStore(clock=lambda: T0)
    entry = {"task": "t", "schedule": "@hourly", "end_at": "2020-01-01T00:00:00Z"}
    sync_definitions(store, [validate_entry("e", entry)], T0, epoch=0)
    later = validate_entry("e", {**entry, "end_at": "2100-01-01T00:00:00Z"})
    report = sync_definitions(store, [later], T0, epoch=0)
    assert report.updated == ["e"]
    assert store.get("e").next_tick_ms == T0 + HOUR  # type: ignore[union-attr]


# -- expires ----------------------------------------------------------------------------------
def test_expires_next_tick_is_the_next_dispatch_instant(frozen: Any) -> None:
    beat = frozen(
        {
            "a": {"task": "t", "schedule": "@every 1h", "expires": "next_tick"},
            "b": {"task": "t", "schedule": "@every 1h", "expires": 90},
        },
        "2026-03-07T00:00:00Z",
    )
    a, b = beat.advance("1h")
    assert a.options["expires"] == datetime(2026, 3, 7, 2, tzinfo=timezone.utc)
    assert b.options["expires"] == 90.0  # seconds from the publish, as apply_async reads them
    record = beat.store.get("a")
    detail = schedule_detail(record, now_ms=0, count=1, after_ms=None, redact_keys=())
    assert detail.description == "every hour, expires at the next tick"
    assert detail.expires == "next_tick"


# -- buffer_one in the round ------------------------------------------------------------------
class _Enqueuing(CapturingPublisher):
    """Captures messages and tells ``MemoryRuns`` they were enqueued (as the audit would)."""

    def __init__(self, runs: MemoryRuns) -> None:
        super().__init__()
        self.runs = runs

    def publish(self, message: TickMessage) -> Any:
        reason = super().publish(message)
        if reason is None:
            self.runs.enqueued(message.schedule, message.tick_ms, message.task_id)
        return reason


class _FakeApp:
    """No broker: a revoke broadcast fails (logged); ``require_worker`` is not used here."""

    control = None

    def send_task(self, name: str, **options: Any) -> None:
        """The signature the round gate's queue router reads."""


class _Rig:
    def __init__(self, **entry: Any) -> None:
        self.now = T0
        self.store = MemoryStore(clock=lambda: self.now)
        self.runs = MemoryRuns(clock=_Clock(self))
        self.publisher = _Enqueuing(self.runs)
        gate = RoundGate(_FakeApp(), Settings(), Runs(self.runs, self.runs))
        self.dispatcher = Dispatcher(self.store, self.publisher, gate=gate, recheck_ms=SECOND)
        definition = validate_entry("job", {"task": "t", "schedule": "@every 10s", **entry})
        self.store.register_epoch(1)
        sync_definitions(self.store, [definition], self.now, epoch=1)

    def at(self, ms: int) -> list[str]:
        """Run a round at T0 + ``ms``; the task ids published in it."""
        self.now = T0 + ms
        before = len(self.publisher.messages)
        self.dispatcher.run_round(self.now, epoch=1)
        return [m.task_id for m in self.publisher.messages[before:]]

    def finish(self, tick_ms: int, state: RunState = RunState.SUCCEEDED) -> None:
        from celery_durable_beat.ids import tick_task_id

        key = RunKey(tick_task_id("job", T0 + tick_ms), "job", T0 + tick_ms, "auto")
        self.runs.write([RunWrite(key, state, "w", HOUR)])

    def events(self) -> list[tuple[int, str, str | None, int | None]]:
        return [
            (e.tick_ms - T0, e.outcome.value, e.reason, e.lag_ms)
            for e in reversed(self.store.history("job", 100))
        ]


class _Clock:
    def __init__(self, rig: _Rig) -> None:
        self.rig = rig

    def now_ms(self) -> int:
        return self.rig.now


def test_buffer_one_holds_the_first_tick_skips_the_rest_and_publishes_when_the_run_ends() -> None:
    rig = _Rig(overlap="buffer_one")
    assert len(rig.at(10 * SECOND)) == 1  # the first tick runs
    assert rig.at(20 * SECOND) == []  # the previous run is unfinished: held
    assert rig.store.get("job").buffered_tick_ms == T0 + 20 * SECOND  # type: ignore[union-attr]
    assert rig.store.earliest_due_ms() == T0 + 21 * SECOND  # looked at again within recheck
    assert rig.at(21 * SECOND) == []  # still running
    assert rig.at(30 * SECOND) == []  # a second tick while one is held: skipped
    rig.finish(10 * SECOND)
    published = rig.at(31 * SECOND)
    assert published == ["job@" + _iso(20 * SECOND)]  # the held tick, as soon as the run ended
    assert rig.store.get("job").buffered_tick_ms is None  # type: ignore[union-attr]
    assert rig.events() == [  # in the order they were recorded
        (10 * SECOND, "enqueued", None, 0),
        (30 * SECOND, "skipped", "overlap", 0),
        (20 * SECOND, "enqueued", None, 11 * SECOND),  # with its real lag
    ]


def test_a_held_tick_whose_publish_fails_stays_held() -> None:
    from celery_durable_beat.model import Reason

    rig = _Rig(overlap="buffer_one")
    rig.at(10 * SECOND)
    rig.at(20 * SECOND)
    rig.finish(10 * SECOND)
    rig.publisher.fail_with = Reason.BROKER_UNAVAILABLE
    assert rig.at(21 * SECOND) == []
    record = rig.store.get("job")
    assert record is not None
    assert (record.buffered_tick_ms, record.next_tick_ms) == (T0 + 20 * SECOND, T0 + 30 * SECOND)
    rig.publisher.fail_with = None
    assert rig.at(23 * SECOND) == ["job@" + _iso(20 * SECOND)]  # after the backoff


def _iso(offset_ms: int) -> str:
    from celery_durable_beat.ids import format_tick_instant

    return format_tick_instant(T0 + offset_ms)


# -- pause_on_failure in the round ------------------------------------------------------------
def test_pause_on_failure_pauses_after_n_failed_runs_and_resume_starts_counting_again() -> None:
    rig = _Rig(pause_on_failure=2)
    rig.at(10 * SECOND)
    rig.finish(10 * SECOND, RunState.FAILED)
    rig.at(20 * SECOND)
    rig.finish(20 * SECOND, RunState.RETRIED)  # a retry in progress is no failure (yet)
    assert len(rig.at(30 * SECOND)) == 1
    rig.finish(20 * SECOND, RunState.FAILED)
    rig.finish(30 * SECOND, RunState.FAILED)
    assert rig.at(40 * SECOND) == []
    record = rig.store.get("job")
    assert record is not None
    assert (record.state, record.state_reason) == (ScheduleState.PAUSED, StateReason.FAILURES)
    assert rig.events()[-1] == (40 * SECOND, "skipped", "failures", 0)
    rig.store.set_state("job", ScheduleState.ACTIVE, rig.now, T0 + 50 * SECOND, T0 + 50 * SECOND)
    assert len(rig.at(50 * SECOND)) == 1  # the failures before the resume no longer count


def test_a_retry_that_succeeds_breaks_the_streak() -> None:
    rig = _Rig(pause_on_failure=2)
    rig.at(10 * SECOND)
    rig.finish(10 * SECOND, RunState.FAILED)
    rig.at(20 * SECOND)
    rig.finish(20 * SECOND, RunState.SUCCEEDED)
    rig.at(30 * SECOND)
    rig.finish(30 * SECOND, RunState.FAILED)
    assert len(rig.at(40 * SECOND)) == 1
    assert rig.store.get("job").state is ScheduleState.ACTIVE  # type: ignore[union-attr]


def test_operator_pause_and_disabled_entries_say_why() -> None:
    store = MemoryStore(clock=lambda: T0)
    off = validate_entry("off", {"task": "t", "schedule": "@hourly", "enabled": False})
    on = validate_entry("on", {"task": "t", "schedule": "@hourly"})
    store.upsert(off, Source.API, T0 + HOUR, T0)
    store.upsert(on, Source.API, T0 + HOUR, T0)
    assert store.get("off").state_reason is StateReason.DISABLED  # type: ignore[union-attr]
    paused = store.set_state("on", ScheduleState.PAUSED, T0, reason=StateReason.OPERATOR)
    assert paused.state_reason is StateReason.OPERATOR
    resumed = store.set_state("on", ScheduleState.ACTIVE, T0, T0 + HOUR, T0 + HOUR)
    assert resumed.state_reason is None
    assert store.get("on").last_outcome is None  # type: ignore[union-attr]
    assert Outcome  # the vocabulary is imported for the readers of this file


def test_a_stop_records_the_held_tick_it_drops() -> None:
    from celery_durable_beat import round_records as records
    from celery_durable_beat.model import Reason
    from celery_durable_beat.store.base import DueSchedule

    definition = validate_entry("job", {"task": "t", "schedule": "@every 10s"})
    due = DueSchedule(1, "job", definition, 1, T0 + 30 * SECOND, None, 0, T0 + 20 * SECOND)
    stopped = list(records.stopped(due, Reason.QUARANTINED, T0 + 31 * SECOND))
    assert [(e.tick_ms - T0, e.reason) for e in stopped] == [
        (20 * SECOND, "quarantined"),
        (30 * SECOND, "quarantined"),
    ]
    advance = records.stop(due, 5, ScheduleState.PAUSED, StateReason.FAILURES)
    assert (advance.state, advance.state_reason, advance.buffered_tick_ms) == (
        ScheduleState.PAUSED,
        StateReason.FAILURES,
        None,
    )
