"""``overlap`` across a round that fails between its publish and its audit write (Gate rule 7).

The round publishes first and records ``enqueued`` after (SPEC §4), and the overlap gate's
previous tick is the newest tick recorded ``enqueued``. A round that fails in between (fenced
after a lease lapse, the store gone, its settle cut off by the idle timeout) leaves a tick that
went to the broker, and runs, with no record. The retry comes after a backoff; once it is more
than one interval late, ``missed: skip`` fires the latest tick instead of replaying that one, and
the gate used to let it through beside the run in progress (the flaky
``test_overlap_skip_never_runs_two_ticks_at_once``). These rounds run the real dispatcher and
``RoundGate`` on ``MemoryRuns``, whose ``previous_tick`` sees a record only once a settle
committed it, as ``SqlRunStore.previous_tick`` joins the audit table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.gates.round_gate import RoundGate
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.model import Outcome, Reason, Trigger
from celery_durable_beat.publish.capturing import CapturingPublisher
from celery_durable_beat.runs.base import RunKey, Runs, RunState, RunWrite
from celery_durable_beat.runs.memory import MemoryRuns
from celery_durable_beat.schedules.validate import validate_entry
from celery_durable_beat.settings import Settings
from celery_durable_beat.store.base import Advance, AuditEvent
from celery_durable_beat.sync import sync_definitions
from tests.support.stores import FaultyMemoryStore, InjectedFault

pytestmark = pytest.mark.unit

T0 = 1_780_000_000_000
SECOND = 1000
HOUR = 3_600_000


class _Clock:
    def __init__(self) -> None:
        self.now = T0

    def now_ms(self) -> int:
        return self.now

    def monotonic(self) -> float:
        return self.now / 1000


class AuditedStore(FaultyMemoryStore):
    """The runs see an ``enqueued`` record once the round's settle committed it, never before."""

    def __init__(self, runs: MemoryRuns, clock: _Clock) -> None:
        super().__init__(clock=clock.now_ms)
        self.runs = runs

    def settle(
        self, events: Sequence[AuditEvent], advances: Sequence[Advance], epoch: int
    ) -> list[bool]:
        applied = super().settle(events, advances, epoch)
        for e in events:
            if e.outcome is Outcome.ENQUEUED and e.task_id and e.trigger is Trigger.AUTO:
                self.runs.enqueued(e.schedule, e.tick_ms, e.task_id)
        return applied


class _Control:
    def __init__(self) -> None:
        self.revoked: list[str] = []

    def revoke(self, task_id: str, terminate: bool = False) -> None:
        self.revoked.append(task_id)


class _App:
    """No broker: revokes are recorded; ``require_worker`` is not used here."""

    def __init__(self) -> None:
        self.control = _Control()

    def send_task(self, name: str, **options: Any) -> None:
        """The signature the round gate's queue router reads."""


class Beat:
    """A leader's rounds on a 1 s schedule, ``overlap: skip`` unless told otherwise, and a
    worker's claims on the same runs."""

    def __init__(self, **entry: Any) -> None:
        self.clock = _Clock()
        self.runs = MemoryRuns(clock=self.clock)
        self.store = AuditedStore(self.runs, self.clock)
        self.publisher = CapturingPublisher()
        self.app = _App()
        entry = {"task": "t", "schedule": "@every 1s", "overlap": "skip", **entry}
        self.store.register_epoch(1)
        sync_definitions(self.store, [validate_entry("job", entry)], T0, epoch=1)
        self.restart()

    def restart(self) -> None:
        """Another beat process from here on: nothing the last one kept in memory."""
        gate = RoundGate(self.app, Settings(queued_ttl=60), Runs(self.runs, self.runs))
        self.dispatcher = Dispatcher(self.store, self.publisher, gate=gate)

    def at(self, ms: int) -> list[str]:
        """A round at T0 + ``ms``; the task ids it published."""
        self.clock.now = T0 + ms
        before = len(self.publisher.messages)
        self.dispatcher.run_round(self.clock.now, epoch=1)
        return [m.task_id for m in self.publisher.messages[before:]]

    def failing_at(self, ms: int) -> list[str]:
        """A round at T0 + ``ms`` whose audit write fails after its publishes; what it sent."""
        self.store.fail_audit_once = True
        before = len(self.publisher.messages)
        with pytest.raises(InjectedFault):
            self.at(ms)
        return [m.task_id for m in self.publisher.messages[before:]]

    def start(self, ms: int, ttl_ms: int = HOUR) -> None:
        """A worker claims the tick T0 + ``ms``: its run starts."""
        assert self.runs.claim(key(ms), "w1", 0, ttl_ms) is None

    def finish(self, ms: int) -> None:
        self.runs.write([RunWrite(key(ms), RunState.SUCCEEDED, "w1", HOUR)])

    def history(self) -> list[tuple[int, str, str | None]]:
        """(tick offset, outcome, reason) of each record, oldest tick first."""
        events = self.store.history("job", 100)
        return sorted((e.tick_ms - T0, e.outcome.value, e.reason) for e in events)


def key(ms: int) -> RunKey:
    return RunKey(tid(ms), "job", T0 + ms, Trigger.AUTO.value)


def tid(ms: int) -> str:
    return tick_task_id("job", T0 + ms)


def test_a_tick_published_by_a_round_that_failed_still_blocks_the_next() -> None:
    beat = Beat()
    assert beat.failing_at(1 * SECOND) == [tid(1 * SECOND)]  # out, but no ``enqueued`` record
    beat.start(1 * SECOND)
    # The retry, 1.5 s later: 1 s and 2 s are due, ``missed: skip`` fires 2 s alone.
    assert beat.at(2 * SECOND + 500) == []  # the 1 s run still runs
    assert beat.at(3 * SECOND) == []  # and in every round after, not only the first
    assert (3 * SECOND, "skipped", Reason.OVERLAP.value) in beat.history()
    beat.finish(1 * SECOND)
    assert beat.at(4 * SECOND) == [tid(4 * SECOND)]
    assert beat.at(5 * SECOND) == []  # from here on the audit knows: 4 s is recorded


def test_it_blocks_while_queued_before_any_worker_has_claimed_it() -> None:
    beat = Beat()
    beat.failing_at(1 * SECOND)
    assert beat.at(2 * SECOND + 500) == []  # no run row yet: queued, as a recorded tick would be
    beat.start(1 * SECOND)
    beat.finish(1 * SECOND)
    assert beat.at(3 * SECOND) == [tid(3 * SECOND)]


def test_the_tick_replayed_in_time_goes_out_again_and_is_recorded() -> None:
    beat = Beat()
    beat.failing_at(1 * SECOND)
    beat.start(1 * SECOND)
    assert beat.at(1 * SECOND + 500) == [tid(1 * SECOND)]  # SPEC §4: the same id again
    assert (1 * SECOND, "enqueued", None) in beat.history()
    assert beat.at(2 * SECOND) == []  # the recorded tick blocks now, as usual
    beat.finish(1 * SECOND)
    assert beat.at(3 * SECOND) == [tid(3 * SECOND)]


def test_a_tick_whose_publish_failed_blocks_nothing() -> None:
    beat = Beat()
    beat.publisher.fail_with = Reason.BROKER_UNAVAILABLE
    assert beat.at(1 * SECOND) == []  # recorded ``failed``: it never reached the broker
    beat.publisher.fail_with = None
    assert beat.at(2 * SECOND + 500) == [tid(2 * SECOND)]


def test_an_unrecorded_tick_never_blocks_forever() -> None:
    lost = Beat()  # its worker died: the claim stopped heartbeating
    lost.failing_at(1 * SECOND)
    lost.start(1 * SECOND, ttl_ms=5 * SECOND)
    assert lost.at(2 * SECOND + 500) == []
    assert lost.at(7 * SECOND) == [tid(7 * SECOND)]
    never = Beat()  # never delivered: queued past ``queued_ttl`` (60 s here)
    never.failing_at(1 * SECOND)
    assert never.at(30 * SECOND) == []
    assert never.at(62 * SECOND) == [tid(62 * SECOND)]


def test_a_beat_started_after_the_failure_finds_the_tick_once_a_worker_claimed_it() -> None:
    beat = Beat()
    beat.failing_at(1 * SECOND)
    beat.start(1 * SECOND)
    beat.restart()
    assert beat.at(2 * SECOND + 500) == []  # its run row, newer than any record, blocks
    beat.finish(1 * SECOND)
    assert beat.at(3 * SECOND) == [tid(3 * SECOND)]


def test_replace_revokes_the_unrecorded_run_once_the_new_tick_is_recorded() -> None:
    beat = Beat(overlap="replace")
    beat.failing_at(1 * SECOND)
    beat.start(1 * SECOND)
    assert beat.at(2 * SECOND + 500) == [tid(2 * SECOND)]
    assert beat.app.control.revoked == [tid(1 * SECOND)]
