"""The enqueue hooks (SPEC §17, ``celery_durable_beat.signals``) on the in-memory backends.

Rounds are real (``Dispatcher`` on a ``MemoryStore`` whose clock the test holds), so what a
receiver hears is what the round recorded: every reason a round skips for, every trigger that
records ``enqueued``, a receiver that raises, and no receiver at all. What real ``celery beat``
processes send is in ``tests/integration/test_signals_processes.py``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from celery_durable_beat import DurableBeat
from celery_durable_beat import signals as hooks
from celery_durable_beat.burst import BurstRounds
from celery_durable_beat.clock import ms_to_datetime
from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.gates.base import OpenGate, PreviousRuns
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.message import TickMessage
from celery_durable_beat.model import Action, Outcome, Reason, Source, Trigger
from celery_durable_beat.publish.capturing import CapturingPublisher
from celery_durable_beat.redelivery import Presence, RedeliveryPolicy
from celery_durable_beat.redelivery_sweep import RedeliverySweep
from celery_durable_beat.runs.base import Runs
from celery_durable_beat.runs.memory import MemoryRuns
from celery_durable_beat.schedules.validate import validate_entries
from celery_durable_beat.signals import RoundSignals, tick_enqueued, tick_skipped
from celery_durable_beat.store.base import DueSchedule
from celery_durable_beat.store.memory import MemoryStore
from celery_durable_beat.testing import FrozenBeat

pytestmark = pytest.mark.unit

T0 = 1_780_000_020_000  # a whole minute (intervals count from the epoch), 2026-05-28T20:27Z
EPOCH = 1
SENDER = object()
"""The ``sender`` the tests' rounds send as (a ``Scheduler`` in beat)."""


class Heard:
    """Every signal a receiver of both hooks heard, in order: ``(signal, sender, fields)``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object, dict[str, Any]]] = []

    def __call__(self, signal: Any, sender: object, **fields: Any) -> None:
        self.calls.append((signal.name, sender, fields))

    def of(self, name: str) -> list[dict[str, Any]]:
        return [fields for signal, _, fields in self.calls if signal == name]


@pytest.fixture
def heard() -> Iterator[Heard]:
    receiver = Heard()
    tick_enqueued.connect(receiver, weak=False)
    tick_skipped.connect(receiver, weak=False)
    yield receiver
    tick_enqueued.disconnect(receiver)
    tick_skipped.disconnect(receiver)


class Beat:
    """A leader's rounds on a memory store, its clock and its gate in the test's hands."""

    def __init__(self, entries: Mapping[str, Mapping[str, Any]], **dispatcher: Any) -> None:
        self.now = T0
        self.store = MemoryStore(clock=lambda: self.now)
        self.store.register_epoch(EPOCH)
        for definition in validate_entries(dict(entries)):
            self.store.upsert(definition, Source.CONFIG, T0 + 60_000, T0)  # first tick, now
        self.publisher = CapturingPublisher()
        self.dispatcher = Dispatcher(
            self.store, self.publisher, on_recorded=RoundSignals(SENDER), **dispatcher
        )

    def round_at(self, now: int) -> None:
        self.now = now
        self.dispatcher.run_round(now, EPOCH)

    def now_ms(self) -> int:  # the clock of the runs backend a redelivery sweep reads
        return self.now

    def monotonic(self) -> float:
        return self.now / 1000


class HeldBack(OpenGate):
    """A gate that holds every publish back for ``reason`` (as ``require_worker``'s and
    ``overlap``'s gates do), and reports ``failing`` schedules' last runs failed."""

    def __init__(self, reason: Reason | None = None, failing: Collection[int] = ()) -> None:
        self.reason = reason
        self.failing = frozenset(failing)

    def begin_round(self, schedules: Sequence[DueSchedule], now_ms: int) -> PreviousRuns:
        return PreviousRuns(failing=self.failing)

    def before_publish(self, due: DueSchedule, message: TickMessage) -> Reason | None:
        return self.reason


class Refusing(CapturingPublisher):
    """A broker that refuses every message for a reason of the schedule's own."""

    def publish(self, message: TickMessage) -> Reason | None:
        return Reason.SERIALIZATION_ERROR


def at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


# -- tick_enqueued -----------------------------------------------------------------------------
def test_an_automatic_tick_is_announced_after_its_record_is_committed(heard: Heard) -> None:
    beat = Beat({"report": {"task": "proj.report", "schedule": "@every 60s"}})
    seen_in_store: list[object] = []
    tick_enqueued.connect(
        lambda sender, task_id, **_: seen_in_store.append(beat.store.find_enqueued(task_id)),
        weak=False,
        dispatch_uid="store-reader",
    )
    try:
        beat.round_at(T0 + 60_000)
    finally:
        tick_enqueued.disconnect(dispatch_uid="store-reader")
    task_id = tick_task_id("report", T0 + 60_000)
    assert heard.calls == [
        (
            "tick_enqueued",
            SENDER,
            {
                "schedule": "report",
                "tick": at(T0 + 60_000),
                "tick_ms": T0 + 60_000,
                "task_id": task_id,
                "trigger": Trigger.AUTO,
            },
        )
    ]
    tick = heard.of("tick_enqueued")[0]["tick"]
    assert tick.tzinfo is not None and tick.utcoffset() == timedelta(0)
    assert type(heard.of("tick_enqueued")[0]["trigger"]) is str  # f"{trigger}" reads "auto"
    (found,) = seen_in_store  # the receiver reads the record it is told about
    assert found is not None and found.task_id == task_id  # type: ignore[attr-defined]


def test_each_round_of_a_burst_announces_its_own_ticks_in_order(heard: Heard) -> None:
    entries = {f"s{i:02d}": {"task": "t", "schedule": "@every 60s"} for i in range(25)}
    beat = Beat(entries, batch_size=10)
    beat.now = T0 + 60_000
    stats = BurstRounds(beat.dispatcher, lambda: beat.now).run(beat.now, EPOCH, lambda: True)
    assert stats.outcomes()["enqueued"] == 25
    names = [fields["schedule"] for fields in heard.of("tick_enqueued")]
    assert names == sorted(entries)  # due order, one announcement per tick, none twice


def test_a_deduplicated_or_failed_tick_is_not_announced(heard: Heard) -> None:
    beat = Beat({"s": {"task": "t", "schedule": "@every 60s"}})
    beat.dispatcher.publisher = Refusing()
    beat.round_at(T0 + 60_000)
    assert [e.outcome for e in beat.store.history("s", 10)] == [Outcome.FAILED]
    assert heard.calls == []


# -- tick_skipped, one test per reason a round records ------------------------------------------
@pytest.mark.parametrize("reason", [Reason.NO_WORKER, Reason.OVERLAP])
def test_a_tick_held_back_at_its_publish_is_announced_with_its_reason(
    heard: Heard, reason: Reason
) -> None:
    beat = Beat({"s": {"task": "t", "schedule": "@every 60s"}}, gate=HeldBack(reason))
    beat.round_at(T0 + 60_000)
    assert heard.calls == [
        (
            "tick_skipped",
            SENDER,
            {
                "schedule": "s",
                "tick": at(T0 + 60_000),
                "tick_ms": T0 + 60_000,
                "reason": reason,
                "trigger": Trigger.AUTO,
                "task_id": tick_task_id("s", T0 + 60_000),  # the id it would have had
                "count": 1,
                "last_tick": at(T0 + 60_000),
            },
        )
    ]
    assert type(heard.calls[0][2]["reason"]) is str  # the word itself, not the enum


def test_missed_ticks_are_one_announcement_with_their_count_and_range(heard: Heard) -> None:
    beat = Beat({"s": {"task": "t", "schedule": "@every 60s", "missed": "skip"}})
    beat.round_at(T0 + 5 * 60_000 + 1_000)  # five due: the latest fires, four are dropped
    (skipped,) = heard.of("tick_skipped")
    assert skipped["reason"] == "missed" and skipped["task_id"] is None
    assert (skipped["tick"], skipped["count"], skipped["last_tick"]) == (
        at(T0 + 60_000),
        4,
        at(T0 + 4 * 60_000),
    )
    assert [f["tick_ms"] for f in heard.of("tick_enqueued")] == [T0 + 5 * 60_000]
    assert [signal for signal, _, _ in heard.calls] == ["tick_skipped", "tick_enqueued"]


def test_a_tick_later_than_max_lateness_is_announced_too_late(heard: Heard) -> None:
    beat = Beat({"s": {"task": "t", "schedule": "@every 60s", "max_lateness": 5}})
    beat.round_at(T0 + 60_000 + 30_000)
    (skipped,) = heard.of("tick_skipped")
    assert (skipped["reason"], skipped["tick_ms"], skipped["count"]) == (
        Reason.TOO_LATE,
        T0 + 60_000,
        1,
    )
    assert heard.of("tick_enqueued") == []


def test_a_schedule_quarantined_after_its_own_faults_is_announced(heard: Heard) -> None:
    beat = Beat({"s": {"task": "t", "schedule": "@every 60s"}}, quarantine_after=3)
    beat.dispatcher.publisher = Refusing()
    for _ in range(3):
        due = beat.store.earliest_due_ms()
        assert due is not None
        beat.round_at(due)
    (skipped,) = heard.of("tick_skipped")  # its failed publishes are not announced
    assert skipped["reason"] == "quarantined" and skipped["task_id"] is None
    assert skipped["tick_ms"] == T0 + 60_000  # the tick it stopped at, retried twice
    assert beat.store.get("s").state.value == "quarantined"  # type: ignore[union-attr]


def test_a_schedule_paused_for_its_failing_runs_is_announced(heard: Heard) -> None:
    beat = Beat({"s": {"task": "t", "schedule": "@every 60s", "pause_on_failure": 2}})
    schedule_id = beat.store.get("s").id  # type: ignore[union-attr]
    beat.dispatcher.gate = HeldBack(failing={schedule_id})
    beat.round_at(T0 + 60_000)
    (skipped,) = heard.of("tick_skipped")
    assert (skipped["reason"], skipped["tick_ms"]) == (Reason.FAILURES, T0 + 60_000)


# -- the other triggers ------------------------------------------------------------------------
def _control(beat: Beat) -> DurableBeat:
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(timezone="UTC", durable_beat_url="sqlite:///never-opened.sqlite3")
    return DurableBeat(app, store=beat.store, publisher=beat.publisher)


def test_a_manual_run_is_announced_with_the_control_api_as_sender(heard: Heard) -> None:
    beat = Beat({"s": {"task": "t", "schedule": "@every 60s"}})
    control = _control(beat)
    result = control.trigger("s", idempotency_key="k1")
    assert heard.calls == [
        (
            "tick_enqueued",
            control,
            {
                "schedule": "s",
                "tick": ms_to_datetime(T0),
                "tick_ms": T0,
                "task_id": result.task_id,
                "trigger": Trigger.MANUAL,
            },
        )
    ]
    assert control.trigger("s", idempotency_key="k1").created is False  # a replay: not again
    assert len(heard.calls) == 1


def test_a_backfill_announces_each_occurrence_it_published(heard: Heard) -> None:
    beat = Beat({"s": {"task": "t", "schedule": "@every 60s"}})
    beat.now = T0 + 10 * 60_000
    control = _control(beat)
    result = control.backfill("s", at(T0 + 60_000), at(T0 + 3 * 60_000))
    enqueued = heard.of("tick_enqueued")
    assert [(f["tick_ms"], f["trigger"]) for f in enqueued] == [
        (T0 + n * 60_000, Trigger.BACKFILL) for n in (1, 2, 3)
    ]
    assert [f["task_id"] for f in enqueued] == [t.task_id for t in result.ticks]
    assert {sender for _, sender, _ in heard.calls} == {control}


class Absent:
    """A broker probe that never finds a tick's message: each is lost."""

    def presence(self, wanted: Mapping[str, Sequence[str]]) -> dict[str, Presence]:
        return {task_id: Presence.ABSENT for ids in wanted.values() for task_id in ids}

    def close(self) -> None:
        pass


def test_a_redelivered_tick_is_announced_again_with_trigger_redeliver(heard: Heard) -> None:
    after = 10_000
    beat = Beat({"s": {"task": "t", "schedule": "@every 60s"}}, redeliver_after_ms=after)
    runs = MemoryRuns(beat)
    sweep = RedeliverySweep(
        beat.store,
        beat.publisher,
        Runs(claims=runs, tracking=runs),
        RedeliveryPolicy(after, 2),
        queue_of=lambda message: "celery",
        probe=Absent(),
        on_recorded=RoundSignals(SENDER),
    )
    beat.round_at(T0 + 60_000)
    for step in (0, 5_000):  # absent twice, 5 s apart: lost, sent again
        beat.now = T0 + 60_000 + after + step
        sweep.maybe_sweep(beat.now, EPOCH)
    task_id = tick_task_id("s", T0 + 60_000)
    assert [(f["task_id"], f["trigger"]) for f in heard.of("tick_enqueued")] == [
        (task_id, Trigger.AUTO),
        (task_id, Trigger.REDELIVER),
    ]


def test_frozen_beat_sends_as_itself(heard: Heard) -> None:
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(
        timezone="UTC",
        beat_schedule={"plain": {"task": "t", "schedule": 60.0}},
    )
    with FrozenBeat(app, start="2026-03-07T00:00:00Z") as beat:
        ticks = beat.advance("2m")
        assert {sender for _, sender, _ in heard.calls} == {beat}
    assert [f["task_id"] for f in heard.of("tick_enqueued")] == [t.task_id for t in ticks]


# -- receivers that raise, and none at all -----------------------------------------------------
def test_a_raising_receiver_is_logged_once_per_round_and_stops_nothing(
    heard: Heard, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[str] = []

    def broken(sender: object, schedule: str, **_: Any) -> None:
        calls.append(schedule)
        raise RuntimeError(f"webhook for {schedule} down")

    tick_enqueued.connect(broken, weak=False)  # after ``heard``'s receiver
    try:
        entries = {name: {"task": "t", "schedule": "@every 60s"} for name in ("a", "b", "c")}
        beat = Beat(entries)
        with caplog.at_level(logging.ERROR, logger="celery_durable_beat.signals"):
            beat.round_at(T0 + 60_000)
    finally:
        tick_enqueued.disconnect(broken)
    assert calls == ["a", "b", "c"]  # raised each time, called each time
    assert [f["schedule"] for f in heard.of("tick_enqueued")] == ["a", "b", "c"]
    advanced = [beat.store.get(name).next_tick_ms for name in entries]  # type: ignore[union-attr]
    assert advanced == [T0 + 120_000] * 3  # the round went on and settled every schedule
    lines = [r for r in caplog.records if getattr(r, "action", None) == Action.HOOK_FAILED.value]
    first, repeats = lines
    assert (first.signal, first.schedule, first.exc_info is not None) == (  # type: ignore[attr-defined]
        "tick_enqueued",
        "a",
        True,
    )
    assert first.receiver.endswith("broken")  # type: ignore[attr-defined]
    assert "RuntimeError: webhook for a down" in first.getMessage()
    assert (repeats.more, repeats.exc_info) == (2, None)  # type: ignore[attr-defined]


def test_a_receiver_raising_baseexception_is_not_swallowed() -> None:
    """A stop request (SystemExit, KeyboardInterrupt) raised in a receiver still stops beat,
    as in Celery's own ``Signal.send``; the round's records are committed before it."""

    def stop(sender: object, **_: Any) -> None:
        raise KeyboardInterrupt

    tick_enqueued.connect(stop, weak=False)
    try:
        beat = Beat({"s": {"task": "t", "schedule": "@every 60s"}})
        with pytest.raises(KeyboardInterrupt):
            beat.round_at(T0 + 60_000)
    finally:
        tick_enqueued.disconnect(stop)
    assert beat.store.find_enqueued(tick_task_id("s", T0 + 60_000)) is not None


def test_with_no_receiver_a_round_builds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    for signal in (tick_enqueued, tick_skipped):  # whatever else this session connected
        monkeypatch.setattr(signal, "receivers", [])
    built: list[object] = []
    monkeypatch.setattr(hooks, "_announce", lambda *args: built.append(args))
    monkeypatch.setattr(hooks, "ms_to_datetime", built.append)
    beat = Beat({"s": {"task": "t", "schedule": "@every 60s", "missed": "skip"}})
    beat.round_at(T0 + 5 * 60_000)
    assert [e.outcome for e in beat.store.history("s", 10)] == [Outcome.ENQUEUED, Outcome.SKIPPED]
    assert built == []


def test_a_receiver_of_one_signal_builds_nothing_for_the_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[str] = []
    monkeypatch.setattr(hooks, "_enqueued", _counting(hooks._enqueued, "enqueued", built))
    heard = Heard()
    tick_skipped.connect(heard, weak=False)
    try:
        beat = Beat({"s": {"task": "t", "schedule": "@every 60s", "missed": "skip"}})
        beat.round_at(T0 + 5 * 60_000)
    finally:
        tick_skipped.disconnect(heard)
    assert [f["reason"] for f in heard.of("tick_skipped")] == [Reason.MISSED]
    assert built == []


def _counting(
    build: Callable[..., dict[str, Any]], name: str, into: list[str]
) -> Callable[..., dict[str, Any]]:
    def counted(*args: Any) -> dict[str, Any]:
        into.append(name)
        return build(*args)

    return counted


def test_a_connect_with_a_sender_hears_only_that_sender() -> None:
    mine, theirs, other = Heard(), Heard(), object()
    tick_enqueued.connect(mine, sender=SENDER, weak=False)
    tick_enqueued.connect(theirs, sender=other, weak=False)
    try:
        Beat({"s": {"task": "t", "schedule": "@every 60s"}}).round_at(T0 + 60_000)
    finally:
        tick_enqueued.disconnect(mine, sender=SENDER)
        tick_enqueued.disconnect(theirs, sender=other)
    assert len(mine.calls) == 1 and theirs.calls == []


def test_the_monitoring_docs_frozen_beat_example_passes() -> None:
    """docs/monitoring.md's test of a receiver runs as written (on a per-minute schedule)."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "monitoring.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", doc, re.DOTALL) if "FrozenBeat(" in b]
    namespace: dict[str, Any] = {}
    exec(compile(block, "docs/monitoring.md", "exec"), namespace)
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(timezone="UTC", beat_schedule={"pulse": {"task": "p", "schedule": 60.0}})
    namespace["test_a_missed_run_is_reported"](app)
    assert not [r for r in tick_skipped.receivers if r[0][0] == "test"]  # it cleaned up
