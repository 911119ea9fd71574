"""The round's one gate (``gates/base.Gate``): ``RoundGate`` on the in-memory runs, and the
dispatcher's use of the port.

The rules of ``gates/base.py`` are checked here by counting the run tracking's reads: one read
for the batch's previous ticks, a streak read only for ``pause_on_failure``, none for a
schedule without a gated key, the live workers at most once per round; ``require_worker``
answered before ``overlap``; follow-up work only after the round settled, for the ticks it
recorded ``enqueued``. The decisions themselves are tested with their modules
(``test_presence``, ``test_schedule_features``, ``tests/integration/test_run_claims``).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator, Sequence
from typing import Any

import pytest
from celery import Celery

from celery_durable_beat.dispatch import Dispatcher, tick_message
from celery_durable_beat.gates.base import OPEN_GATE, OpenGate, PreviousRuns
from celery_durable_beat.gates.round_gate import RoundGate
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.message import TickMessage
from celery_durable_beat.model import Definition, OverlapPolicy, Reason, Trigger
from celery_durable_beat.publish.capturing import CapturingPublisher
from celery_durable_beat.runs.base import PreviousTick, RunKey, Runs, RunState, RunWrite, WorkerSeen
from celery_durable_beat.runs.memory import MemoryRuns
from celery_durable_beat.schedules.spec import IntervalSpec
from celery_durable_beat.schedules.validate import validate_entries
from celery_durable_beat.settings import Settings
from celery_durable_beat.store.base import DueSchedule
from celery_durable_beat.sync import sync_definitions
from tests.support.stores import FaultyMemoryStore, InjectedFault

pytestmark = pytest.mark.unit

T0 = 1_780_000_000_000
MINUTE = 60_000
EPOCH = 1


class CountingRuns(MemoryRuns):
    """``MemoryRuns`` that counts the reads the gates make, by method."""

    def __init__(self) -> None:
        super().__init__(clock=None)
        self.reads: dict[str, int] = {}
        self.closed = 0

    def _read(self, name: str) -> None:
        self.reads[name] = self.reads.get(name, 0) + 1

    def states(self, task_ids: Sequence[str]) -> dict[str, RunState]:
        self._read("states")
        return super().states(task_ids)

    def recent_states(self, schedule: str, since_tick_ms: int | None, limit: int) -> list[RunState]:
        self._read("recent_states")
        return super().recent_states(schedule, since_tick_ms, limit)

    def previous_tick(self, schedule: str, before_tick_ms: int) -> PreviousTick | None:
        self._read("previous_tick")
        return super().previous_tick(schedule, before_tick_ms)

    def live_workers(self, ttl_ms: int) -> list[WorkerSeen]:
        self._read("live_workers")
        return super().live_workers(ttl_ms)

    def close(self) -> None:
        self.closed += 1
        super().close()


@pytest.fixture
def app() -> Iterator[Celery]:
    app = Celery("proj", broker="memory://", set_as_current=False)
    yield app
    app.close()


@pytest.fixture
def runs() -> CountingRuns:
    return CountingRuns()


@pytest.fixture
def gate(app: Celery, runs: CountingRuns) -> RoundGate:
    return RoundGate(app, Settings(), Runs(runs, runs))


def due(
    name: str = "job", schedule_id: int = 1, last_tick_ms: int | None = None, **keys: Any
) -> DueSchedule:
    definition = Definition(name=name, task="t.work", spec=IntervalSpec(MINUTE), **keys)
    return DueSchedule(
        id=schedule_id,
        name=name,
        definition=definition,
        version=1,
        next_tick_ms=T0,
        last_tick_ms=last_tick_ms,
        failures=0,
    )


def finished(runs: MemoryRuns, name: str, tick_ms: int, state: RunState) -> None:
    key = RunKey(tick_task_id(name, tick_ms), name, tick_ms, Trigger.AUTO.value)
    runs.write([RunWrite(key, state, "w", MINUTE)])


# -- RoundGate: what it reads -------------------------------------------------------------------


def test_schedules_with_no_gated_key_cost_no_read(gate: RoundGate, runs: CountingRuns) -> None:
    plain = [due("a", 1), due("b", 2)]  # never fired: no previous tick to look at
    assert gate.begin_round(plain, T0) == PreviousRuns()
    for item in plain:
        assert gate.before_publish(item, tick_message(item, T0)) is None
    gate.after_settle({tick_task_id("a", T0)})
    assert runs.reads == {}


def test_begin_round_reads_the_batch_once_and_streaks_only_where_the_key_is_set(
    gate: RoundGate, runs: CountingRuns
) -> None:
    misspelt = due("misspelt", 1, last_tick_ms=T0 - MINUTE)
    failing = due("failing", 2, last_tick_ms=T0 - MINUTE, pause_on_failure=2)
    fine = due("fine", 3, last_tick_ms=T0 - MINUTE)
    finished(runs, "misspelt", T0 - MINUTE, RunState.UNKNOWN_TASK)
    finished(runs, "failing", T0 - 2 * MINUTE, RunState.FAILED)
    finished(runs, "failing", T0 - MINUTE, RunState.FAILED)
    learnt = gate.begin_round([misspelt, failing, fine], T0)
    assert learnt == PreviousRuns(unknown_task=frozenset({1}), failing=frozenset({2}))
    assert runs.reads == {"states": 1, "recent_states": 1}


def test_an_empty_round_reads_nothing(gate: RoundGate, runs: CountingRuns) -> None:
    assert gate.begin_round([], T0) == PreviousRuns()
    assert runs.reads == {}


def test_live_workers_are_read_once_per_round_on_the_first_tick_that_needs_them(
    gate: RoundGate, runs: CountingRuns
) -> None:
    pinned = due("pinned", require_worker=True)
    gate.begin_round([pinned], T0)
    assert runs.reads == {}  # nothing needed them yet
    assert gate.before_publish(pinned, tick_message(pinned, T0)) is Reason.NO_WORKER
    runs.announce_worker("w1@a", ["celery"])
    assert gate.before_publish(pinned, tick_message(pinned, T0 + MINUTE)) is Reason.NO_WORKER
    assert runs.reads == {"live_workers": 1}  # the round's one read, kept for the round
    gate.begin_round([pinned], T0)
    assert gate.before_publish(pinned, tick_message(pinned, T0 + 2 * MINUTE)) is None
    assert runs.reads == {"live_workers": 2}


# -- RoundGate: order and follow-up work --------------------------------------------------------


class Revokes:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def revoke(self, task_id: str, terminate: bool = False) -> None:
        self.sent.append(task_id)


def replaced_schedule(runs: MemoryRuns, **keys: Any) -> tuple[DueSchedule, TickMessage]:
    """A ``replace`` schedule whose previous tick (T0) is still queued, and its next tick."""
    item = due(overlap=OverlapPolicy.REPLACE, last_tick_ms=T0, **keys)
    runs.enqueued(item.name, T0, tick_task_id(item.name, T0))
    return item, tick_message(item, T0 + MINUTE)


def test_a_tick_held_for_want_of_a_worker_displaces_nothing(
    app: Celery, gate: RoundGate, runs: CountingRuns
) -> None:
    control = Revokes()
    app.control = control
    item, message = replaced_schedule(runs, require_worker=True)
    gate.begin_round([item], T0)
    assert gate.before_publish(item, message) is Reason.NO_WORKER
    assert "previous_tick" not in runs.reads  # the overlap gate was never asked
    gate.after_settle({message.task_id})
    assert control.sent == []
    assert runs.state(tick_task_id("job", T0)) is None


def test_replace_revokes_only_after_settle_and_only_for_ticks_recorded_enqueued(
    app: Celery, gate: RoundGate, runs: CountingRuns
) -> None:
    control = Revokes()
    app.control = control
    item, message = replaced_schedule(runs)
    assert gate.before_publish(item, message) is None  # published, the previous one displaced
    assert control.sent == []  # nothing before the round settled
    gate.after_settle(())  # the round failed: forgotten
    gate.after_settle({message.task_id})  # and never done later
    assert control.sent == []
    assert gate.before_publish(item, message) is None
    gate.after_settle({message.task_id})
    previous = tick_task_id("job", T0)
    assert control.sent == [previous]
    assert runs.state(previous) is RunState.REVOKED


def test_after_settle_never_raises_for_any_tracking_error(
    app: Celery, gate: RoundGate, runs: CountingRuns, caplog: pytest.LogCaptureFixture
) -> None:
    """Rule 5: an error the tracking backend names (not only ``StoreError``: a driver's own)
    while marking the displaced run revoked is logged with its cause, never raised into the
    round that already settled; that revoke is not sent (as for a ``StoreError``)."""
    caplog.set_level(logging.DEBUG, logger="celery_durable_beat")
    control = Revokes()
    app.control = control
    item, message = replaced_schedule(runs)
    assert gate.before_publish(item, message) is None

    def refuse(*_: Any) -> None:
        raise OSError("tracking connection reset")

    runs.errors = (OSError,)
    runs.mark_revoked = refuse  # type: ignore[method-assign]
    gate.after_settle({message.task_id})
    assert control.sent == []
    (line,) = [r for r in caplog.records if r.__dict__.get("action") == "revoke_failed"]
    assert "OSError: tracking connection reset" in line.getMessage()


def test_close_releases_the_run_tracking(gate: RoundGate, runs: CountingRuns) -> None:
    gate.close()
    assert runs.closed == 1


def test_the_open_gate_lets_everything_through() -> None:
    item = due(overlap=OverlapPolicy.SKIP, require_worker=True, last_tick_ms=T0)
    assert OPEN_GATE.begin_round([item], T0) == PreviousRuns()
    assert OPEN_GATE.before_publish(item, tick_message(item, T0)) is None
    OPEN_GATE.after_settle({"x"})
    OPEN_GATE.close()


# -- the dispatcher through the port ------------------------------------------------------------


class Recording(OpenGate):
    """A gate that records what the round asks of it, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.published: list[list[str]] = []
        """What each ``after_settle`` said went to the broker, recorded or not (rule 7)."""

    def begin_round(self, schedules: Sequence[DueSchedule], now_ms: int) -> PreviousRuns:
        self.calls.append(("begin_round", sorted(d.name for d in schedules)))
        return PreviousRuns()

    def before_publish(self, due: DueSchedule, message: TickMessage) -> Reason | None:
        self.calls.append(("before_publish", message.task_id))
        return Reason.OVERLAP if due.name == "held" else None

    def after_settle(self, enqueued: Collection[str], published: Collection[str] = ()) -> None:
        self.calls.append(("after_settle", sorted(enqueued)))
        self.published.append(sorted(published))


@pytest.fixture
def store() -> FaultyMemoryStore:
    s = FaultyMemoryStore()
    s.register_epoch(EPOCH)
    entries = validate_entries(
        {
            "held": {"task": "t", "schedule": "@every 5s"},
            "sent": {"task": "t", "schedule": "@every 5s"},
        }
    )
    sync_definitions(s, entries, T0)
    return s


def test_the_round_asks_once_before_publishing_and_settles_with_the_enqueued_ticks(
    store: FaultyMemoryStore,
) -> None:
    gate = Recording()
    pub = CapturingPublisher()
    Dispatcher(store, pub, gate=gate).run_round(T0 + 5_000, EPOCH)
    held, sent = tick_task_id("held", T0 + 5_000), tick_task_id("sent", T0 + 5_000)
    assert gate.calls[0] == ("begin_round", ["held", "sent"])
    assert sorted(gate.calls[1:3]) == [("before_publish", held), ("before_publish", sent)]
    assert gate.calls[3:] == [("after_settle", [sent])]
    assert gate.published == [[sent]]
    assert [m.task_id for m in pub.messages] == [sent]


def test_a_failed_round_settles_nothing_but_names_what_it_published(
    store: FaultyMemoryStore,
) -> None:
    gate = Recording()
    store.fail_audit_once = True
    with pytest.raises(InjectedFault):
        Dispatcher(store, CapturingPublisher(), gate=gate).run_round(T0 + 5_000, EPOCH)
    assert gate.calls[-1] == ("after_settle", [])
    assert gate.published == [[tick_task_id("sent", T0 + 5_000)]]  # out, with no record


class Unconfirmed(CapturingPublisher):
    """The broker never confirms: every publish of the round is uncertain."""

    def confirm(self) -> Reason | None:
        return Reason.BROKER_UNAVAILABLE


@pytest.mark.parametrize("failure", ["refused", "unconfirmed"])
def test_a_publish_that_failed_or_is_uncertain_is_not_published(
    store: FaultyMemoryStore, failure: str
) -> None:
    gate = Recording()
    pub = Unconfirmed() if failure == "unconfirmed" else CapturingPublisher()
    if failure == "refused":
        pub.fail_with = Reason.BROKER_UNAVAILABLE
    Dispatcher(store, pub, gate=gate).run_round(T0 + 5_000, EPOCH)
    assert gate.calls[-1] == ("after_settle", [])  # recorded ``failed``
    assert gate.published == [[]]


def test_nothing_due_asks_the_gate_nothing(store: FaultyMemoryStore) -> None:
    gate = Recording()
    Dispatcher(store, CapturingPublisher(), gate=gate).run_round(T0 + 1_000, EPOCH)
    assert gate.calls == []
