"""The dispatch round on the in-memory store: order, dedup, failures, quarantine.

Logic only, in milliseconds; what needs a real database (a restart reading what another process
wrote, a stored definition this version cannot read) is in ``tests/integration/test_dispatch.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import pytest

from celery_durable_beat.dispatch import Dispatcher, TickMessage
from celery_durable_beat.gates.base import OpenGate, PreviousRuns
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.model import Reason, ScheduleState, Source
from celery_durable_beat.publish.capturing import CapturingPublisher
from celery_durable_beat.schedules.validate import validate_entries
from celery_durable_beat.store.base import DueSchedule, Store
from celery_durable_beat.sync import sync_definitions
from tests.support.stores import FaultyMemoryStore, InjectedFault

pytestmark = pytest.mark.unit

T0 = 1_780_000_000_000  # a whole second, 2026-05-28
EPOCH = 1


def _defs(**entries: dict[str, object]) -> list:  # type: ignore[type-arg]
    return validate_entries(entries)


@pytest.fixture
def store() -> FaultyMemoryStore:
    s = FaultyMemoryStore()
    s.register_epoch(EPOCH)
    return s


def _round(store: Store, publisher: CapturingPublisher, now_ms: int) -> list[TickMessage]:
    before = len(publisher.messages)
    Dispatcher(store, publisher, quarantine_after=3).run_round(now_ms, EPOCH)
    return publisher.messages[before:]


def test_ticks_carry_identity_and_rendered_placeholders(store: FaultyMemoryStore) -> None:
    sync_definitions(
        store,
        _defs(
            report={
                "task": "proj.report",
                "schedule": "@every 10s",
                "args": ["{{scheduled_for_ms}}"],
                "kwargs": {"at": "{{scheduled_for}}", "nested": ["x {{scheduled_for}}"]},
            }
        ),
        T0,
    )
    pub = CapturingPublisher()
    sent = _round(store, pub, T0 + 10_000)
    assert [m.task_id for m in sent] == [tick_task_id("report", T0 + 10_000)]
    message = sent[0]
    assert message.args == (str(T0 + 10_000),)
    assert message.kwargs["at"] == "2026-05-28T20:26:50+00:00"
    assert message.kwargs["nested"] == ["x 2026-05-28T20:26:50+00:00"]
    history = store.history("report", 10)
    assert [(e.outcome.value, e.task_id) for e in history] == [("enqueued", message.task_id)]


def test_nothing_due_publishes_nothing_and_reads_no_rows(store: FaultyMemoryStore) -> None:
    sync_definitions(store, _defs(a={"task": "t", "schedule": "@every 60s"}), T0)
    pub = CapturingPublisher()
    stats = Dispatcher(store, pub).run_round(T0 + 1_000, EPOCH)
    assert stats.claimed == 0 and pub.messages == []


def test_failed_audit_write_replays_the_same_task_id(store: FaultyMemoryStore) -> None:
    sync_definitions(store, _defs(s={"task": "t", "schedule": "@every 5s"}), T0)
    pub = CapturingPublisher()
    store.fail_audit_once = True
    with pytest.raises(InjectedFault):
        _round(store, pub, T0 + 5_000)
    assert store.get("s").next_tick_ms == T0 + 5_000  # not advanced
    assert store.history("s", 10) == []
    replay = _round(store, pub, T0 + 5_500)
    assert [m.task_id for m in pub.messages] == [tick_task_id("s", T0 + 5_000)] * 2
    assert replay[0].task_id == pub.messages[0].task_id
    assert store.get("s").next_tick_ms == T0 + 10_000


def test_crash_between_audit_and_advance_deduplicates(store: FaultyMemoryStore) -> None:
    sync_definitions(store, _defs(s={"task": "t", "schedule": "@every 5s"}), T0)
    pub = CapturingPublisher()
    store.fail_advance_once = True
    with pytest.raises(InjectedFault):
        _round(store, pub, T0 + 5_000)
    assert store.get("s").next_tick_ms == T0 + 5_000
    assert _round(store, pub, T0 + 5_200) == []  # no second publish
    outcomes = [(e.outcome.value, e.reason) for e in store.history("s", 10)]
    assert outcomes == [("deduplicated", "already_enqueued"), ("enqueued", None)]
    assert store.get("s").next_tick_ms == T0 + 10_000


class _PoisonPublisher(CapturingPublisher):
    """A broker that rejects one schedule's messages for a reason of their own."""

    def __init__(self, poisoned: str, reason: Reason) -> None:
        super().__init__()
        self.poisoned, self.reason = poisoned, reason

    def publish(self, message: TickMessage) -> Reason | None:
        if message.schedule == self.poisoned:
            return self.reason
        return super().publish(message)


def test_own_fault_quarantines_while_others_fire(store: FaultyMemoryStore) -> None:
    sync_definitions(
        store,
        _defs(
            bad={"task": "t", "schedule": "@every 1s"},
            good={"task": "t", "schedule": "@every 1s"},
        ),
        T0,
    )
    pub = _PoisonPublisher("bad", Reason.SERIALIZATION_ERROR)
    now = T0
    for _ in range(12):
        now += 1000
        due = store.earliest_due_ms()
        _round(store, pub, max(now, due or now))
        now = max(now, due or now)
    bad = store.get("bad")
    assert bad.state is ScheduleState.QUARANTINED and bad.next_due_ms is None
    assert {m.schedule for m in pub.messages} == {"good"}
    assert len(pub.messages) >= 10
    reasons = [e.reason for e in store.history("bad", 20)]
    assert reasons[0] == "quarantined" and reasons.count("serialization_error") == 3


def test_broker_outage_records_failed_stops_the_round_and_recovers(
    store: FaultyMemoryStore,
) -> None:
    sync_definitions(
        store,
        _defs(
            a={"task": "t", "schedule": "@every 5s"},
            b={"task": "t", "schedule": "@every 5s"},
        ),
        T0,
    )
    pub = CapturingPublisher()
    pub.fail_with = Reason.BROKER_UNAVAILABLE
    stats = Dispatcher(store, pub).run_round(T0 + 5_000, EPOCH)
    assert stats.broker_unavailable and stats.outcomes()["failed"] == 1
    for name in ("a", "b"):
        record = store.get(name)
        assert record.state is ScheduleState.ACTIVE and record.failures == 0
        assert record.next_tick_ms == T0 + 5_000
    pub.fail_with = None
    sent = _round(store, pub, T0 + 6_000)
    assert sorted(m.task_id for m in sent) == [
        tick_task_id("a", T0 + 5_000),
        tick_task_id("b", T0 + 5_000),
    ]


def test_missed_ticks_leave_one_skipped_record(store: FaultyMemoryStore) -> None:
    sync_definitions(store, _defs(s={"task": "t", "schedule": "@every 1s", "missed": "skip"}), T0)
    pub = CapturingPublisher()
    sent = _round(store, pub, T0 + 60_000)
    assert [m.tick_ms for m in sent] == [T0 + 60_000]
    skipped = [e for e in store.history("s", 10) if e.outcome.value == "skipped"]
    assert len(skipped) == 1 and skipped[0].reason == "missed"
    assert skipped[0].detail["count"] == 59


def test_batch_size_bounds_a_round(store: FaultyMemoryStore) -> None:
    sync_definitions(
        store, _defs(**{f"s{i}": {"task": "t", "schedule": "@every 1s"} for i in range(7)}), T0
    )
    pub = CapturingPublisher()
    stats = Dispatcher(store, pub, batch_size=3).run_round(T0 + 1_000, EPOCH)
    assert stats.claimed == 3 and len(pub.messages) == 3


def test_config_source_recorded(store: FaultyMemoryStore) -> None:
    sync_definitions(store, _defs(s={"task": "t", "schedule": "@every 1s"}), T0)
    assert store.get("S").source is Source.CONFIG


class UnknownTasks(OpenGate):
    """A gate whose ``begin_round`` reports what ``watch`` says no worker knew."""

    def __init__(self, watch: Callable[[Sequence[DueSchedule]], set[int]]) -> None:
        self.watch = watch

    def begin_round(self, schedules: Sequence[DueSchedule], now_ms: int) -> PreviousRuns:
        return PreviousRuns(unknown_task=frozenset(self.watch(schedules)))


def test_previous_ticks_no_worker_knew_quarantine_after_k_in_a_row(
    store: FaultyMemoryStore,
) -> None:
    """SPEC §6: workers record ``unknown_task``; the round counts them; K in a row quarantine."""
    sync_definitions(
        store,
        _defs(
            misspelt={"task": "nope", "schedule": "@every 1s"},
            good={"task": "t", "schedule": "@every 1s"},
        ),
        T0,
    )
    unknown: set[str] = set()  # task ids the "workers" recorded unknown_task

    def watch(schedules: Sequence[DueSchedule]) -> set[int]:
        return {
            d.id
            for d in schedules
            if d.last_tick_ms is not None and tick_task_id(d.name, d.last_tick_ms) in unknown
        }

    pub = CapturingPublisher()
    dispatcher = Dispatcher(store, pub, quarantine_after=3, gate=UnknownTasks(watch))
    now = T0
    for _ in range(8):
        now = max(now + 1000, store.earliest_due_ms() or now)
        dispatcher.run_round(now, EPOCH)
        unknown.update(m.task_id for m in pub.messages if m.schedule == "misspelt")
    misspelt = store.get("misspelt")
    assert misspelt is not None and misspelt.state is ScheduleState.QUARANTINED
    assert sum(m.schedule == "misspelt" for m in pub.messages) == 3
    assert sum(m.schedule == "good" for m in pub.messages) == 8
    assert store.history("misspelt", 1)[0].reason == "quarantined"


def test_a_tick_a_worker_knew_resets_the_unknown_task_streak(store: FaultyMemoryStore) -> None:
    sync_definitions(store, _defs(flaky={"task": "t", "schedule": "@every 1s"}), T0)
    pub = CapturingPublisher()
    answers = iter([False, True, True, False, True, True, False, True, True])

    def watch(schedules: Sequence[DueSchedule]) -> set[int]:
        return {d.id for d in schedules if d.last_tick_ms is not None and next(answers)}

    dispatcher = Dispatcher(store, pub, quarantine_after=3, gate=UnknownTasks(watch))
    now = T0
    for _ in range(10):
        now = max(now + 1000, store.earliest_due_ms() or now)
        dispatcher.run_round(now, EPOCH)
    flaky = store.get("flaky")
    assert flaky is not None and flaky.state is ScheduleState.ACTIVE
    assert len(pub.messages) == 10


def test_the_lease_check_runs_before_every_publish_and_stops_only_between_schedules(
    store: FaultyMemoryStore,
) -> None:
    """``still_leader`` renews an aging lease as one schedule's backlog goes out (Leadership.
    keep_leading): before each schedule, then before each of its ticks after the first; a
    False stops the round at the next schedule, never halfway through one."""
    sync_definitions(
        store,
        _defs(
            a={"task": "t", "schedule": "@every 1s", "missed": "backfill"},
            b={"task": "t", "schedule": "@every 1s", "missed": "backfill"},
        ),
        T0,
    )
    calls: list[int] = []
    pub = CapturingPublisher()

    def still_leader() -> bool:
        calls.append(len(pub.messages))
        return len(pub.messages) < 2  # the lease is lost once two ticks are out

    stats = Dispatcher(store, pub, still_leader=still_leader).run_round(T0 + 5_000, EPOCH)
    assert [m.task_id for m in pub.messages] == [
        tick_task_id("a", T0 + s * 1000) for s in range(1, 6)
    ]  # schedule a's five ticks all went, though the lease was lost after its second
    assert calls == [0, 1, 2, 3, 4, 5]  # before a, before each later publish, before b: stop
    assert stats.claimed == 2
    assert store.history("b", 10) == []  # b stays due for whoever leads next


def _sent_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if getattr(r, "action", "") == "tick_sent"]


def test_each_enqueued_tick_is_logged_in_stock_beats_words(
    store: FaultyMemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Stock beat (``celery.beat.Scheduler.apply_entry``, Celery's reference) logs
    ``Scheduler: Sending due task <name> (<task>)`` at INFO per tick; so does the round, after
    the tick is recorded ``enqueued``, with its task id after it (SPEC §4)."""
    from celery import Celery
    from celery.beat import ScheduleEntry, Scheduler

    app = Celery("stock", broker="memory://", set_as_current=False)
    caplog.set_level(logging.INFO)
    stock = Scheduler(app, lazy=True)
    entry = ScheduleEntry(name="Nightly digest", task="proj.digest", schedule=60.0, app=app)
    stock.apply_entry(entry)
    (stock_line,) = [r.getMessage() for r in caplog.records if r.name == "celery.beat"]
    app.close()

    sync_definitions(
        store, _defs(**{"Nightly digest": {"task": "proj.digest", "schedule": 60}}), T0
    )
    _round(store, CapturingPublisher(), T0 + 60_000)
    (line,) = _sent_lines(caplog)
    (record,) = store.history("Nightly digest", 10)
    assert line == f"{stock_line} {record.task_id}"
    assert stock_line == "Scheduler: Sending due task Nightly digest (proj.digest)"


def test_a_burst_of_over_100_ticks_is_one_line(
    store: FaultyMemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    entries = {f"s{i:03d}": {"task": "t.x", "schedule": 60} for i in range(101)}
    sync_definitions(store, _defs(**entries), T0)
    caplog.set_level(logging.INFO, logger="celery_durable_beat.dispatch")
    _round(store, CapturingPublisher(), T0 + 60_000)
    assert _sent_lines(caplog) == ["Scheduler: Sending due tasks: 101 ticks of 101 schedules"]
    caplog.clear()
    sync_definitions(store, _defs(**dict(list(entries.items())[:100])), T0)
    _round(store, CapturingPublisher(), T0 + 120_000)
    assert len(_sent_lines(caplog)) == 100  # at most 100: a line each


def test_a_tick_without_placeholders_carries_its_definition_s_own_values() -> None:
    """Rendering is skipped where nothing would change (asked once per definition): the
    message shares the definition's args, kwargs and (without an expiry) options; with
    placeholders or a manual run's overrides, it gets rendered copies and the definition
    stays as it was."""
    from celery_durable_beat.message import build_message

    [plain, marked] = _defs(
        plain={"task": "t", "schedule": "@every 5s", "args": [1], "kwargs": {"k": ["v"]}},
        marked={"task": "t", "schedule": "@every 5s", "kwargs": {"at": "{{scheduled_for_ms}}"}},
    )
    assert not plain.has_placeholders and marked.has_placeholders
    message = build_message("plain", plain, T0, "id")
    assert message.args is plain.args and message.kwargs is plain.kwargs
    assert message.options is plain.options
    overridden = build_message("plain", plain, T0, "id", overrides={"at": "{{scheduled_for_ms}}"})
    assert overridden.kwargs == {"k": ["v"], "at": str(T0)} and plain.kwargs == {"k": ["v"]}
    rendered = build_message("marked", marked, T0, "id")
    assert rendered.kwargs == {"at": str(T0)}
    assert marked.kwargs == {"at": "{{scheduled_for_ms}}"}
    assert "has_placeholders" in plain.renamed("other").__dict__  # asked once, shared
