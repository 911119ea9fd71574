"""The records a round writes: audit events and advances, built from what the round decided.

Values only (``store/base.py``'s ``AuditEvent`` and ``Advance``): the round in ``dispatch.py``
decides, this module spells the decision out the same way every time — one shape for a tick's
event, one for a quarantine, one ``skipped`` record per reason for dropped ticks (SPEC §4: never
silent), and the backoff a failing schedule waits.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from celery_durable_beat.model import Outcome, Reason, ScheduleState, StateReason, Trigger
from celery_durable_beat.policy import Dropped, due_ms
from celery_durable_beat.store.base import Advance, AuditEvent, DueSchedule

BACKOFF_BASE_MS = 1000
BACKOFF_MAX_MS = 60_000


def event(
    due: DueSchedule,
    tick_ms: int,
    task_id: str | None,
    outcome: Outcome,
    reason: Reason | None,
    now_ms: int,
    detail: Mapping[str, Any] | None = None,
) -> AuditEvent:
    """The audit record of one automatic tick (or range of dropped ticks) of ``due``."""
    return AuditEvent(
        schedule=due.name,
        tick_ms=tick_ms,
        task_id=task_id,
        trigger=Trigger.AUTO,
        outcome=outcome,
        reason=reason.value if reason else None,
        lag_ms=max(0, now_ms - tick_ms),
        version=due.version,
        detail=detail or {},
    )


def dropped_events(
    due: DueSchedule, dropped: Sequence[Dropped], settled_before: int | None, now_ms: int
) -> Iterator[AuditEvent]:
    """One ``skipped`` record per reason for dropped ticks the schedule moves past (all of
    them when ``settled_before`` is None: the schedule has no tick left)."""
    for gone in dropped:
        if settled_before is not None and gone.last_ms >= settled_before:
            continue
        detail = {
            "count": gone.count,
            "first_ms": gone.first_ms,
            "last_ms": gone.last_ms,
            "exact": gone.exact,
        }
        yield event(due, gone.first_ms, None, Outcome.SKIPPED, gone.reason, now_ms, detail)


def advance_to(
    due: DueSchedule,
    next_tick: int | None,
    last_fired: int | None,
    own: Sequence[AuditEvent],
    failures: int = 0,
) -> Advance:
    """Move ``due`` on to ``next_tick``, due at its jittered instant (None: past its end)."""
    return Advance(
        schedule_id=due.id,
        expected_next_tick_ms=due.next_tick_ms,
        next_tick_ms=next_tick,
        next_due_ms=None if next_tick is None else due_ms(due.name, due.definition, next_tick),
        last_tick_ms=last_fired if last_fired is not None else due.last_tick_ms,
        last_outcome=own[-1].outcome if own else None,
        failures=failures,
    )


def quarantine(due: DueSchedule, failures: int) -> Advance:
    """Stop ``due`` where it is (not due until resumed); its ``skipped`` record says why."""
    return stop(due, failures, ScheduleState.QUARANTINED)


def stop(
    due: DueSchedule, failures: int, state: ScheduleState, reason: StateReason | None = None
) -> Advance:
    """Leave ``due`` at its tick in ``state`` (quarantined, or paused for ``reason``): nothing
    is due until an operator resumes it; a held ``buffer_one`` tick is dropped with it."""
    return Advance(
        schedule_id=due.id,
        expected_next_tick_ms=due.next_tick_ms,
        next_tick_ms=due.next_tick_ms,
        next_due_ms=None,
        last_tick_ms=due.last_tick_ms,
        last_outcome=Outcome.SKIPPED,
        failures=failures,
        state=state,
        state_reason=reason,
    )


def stopped(due: DueSchedule, reason: Reason, now_ms: int) -> Iterator[AuditEvent]:
    """The ``skipped`` records of a schedule stopped where it stands: its next tick and, when
    ``buffer_one`` held one, that tick too (a stop drops it, never silently)."""
    ticks = {due.next_tick_ms, due.buffered_tick_ms} - {None}
    for tick in sorted(t for t in ticks if t is not None):
        yield event(due, tick, None, Outcome.SKIPPED, reason, now_ms)


def position(due: DueSchedule) -> int:
    """The tick a schedule's round stands at: its next tick, or the held ``buffer_one`` tick
    when it has none left (a due row always has one of the two)."""
    tick = due.next_tick_ms if due.next_tick_ms is not None else due.buffered_tick_ms
    assert tick is not None, f"schedule {due.name} is due with no tick"
    return tick


def reason_of(value: str | None) -> Reason | None:
    return Reason(value) if value else None


def by_tick(record: AuditEvent) -> int:
    """Records of one schedule in a round go in tick order (stable: failed before quarantined)."""
    return record.tick_ms


def backoff_ms(failures: int) -> int:
    """How long a schedule that failed ``failures`` times in a row waits: doubling, capped."""
    return int(min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** min(failures - 1, 16)))
