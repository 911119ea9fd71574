"""The rows of ``MemoryStore``: a schedule row and the fence row, storage only.

Each mirrors one table of the SQL store (``store/tables.py``); what to write into them is
decided by ``store/rules.py`` (and, for the fence row, the rules of ``lease/sql.py``), so the two
backends answer alike. A schedule row keeps the parsed ``Definition`` only (never its JSON
beside it): what a round needs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from celery_durable_beat.ids import name_key
from celery_durable_beat.lease.base import LeaseRow
from celery_durable_beat.model import (
    Definition,
    Outcome,
    ScheduleState,
    Source,
    StateReason,
    Trigger,
)
from celery_durable_beat.store.rules import state_values, stored_row, stored_value
from celery_durable_beat.store.values import (
    Advance,
    AuditEvent,
    DueSchedule,
    Recheck,
    RedeliveryCandidate,
    ScheduleRecord,
    StoredEvent,
    StoredRow,
)


def to_stored(event_id: int, event: AuditEvent, epoch: int, now_ms: int) -> StoredEvent:
    """An audit event as the SQL store keeps it: enums as values, ``detail`` as detached JSON."""
    return StoredEvent(
        id=event_id,
        schedule=event.schedule,
        tick_ms=event.tick_ms,
        task_id=event.task_id,
        trigger=Trigger(stored_value(event.trigger)),
        outcome=Outcome(stored_value(event.outcome)),
        reason=stored_value(event.reason),
        lag_ms=event.lag_ms,
        version=event.version,
        epoch=epoch,
        recorded_at_ms=now_ms,
        detail=json.loads(json.dumps(dict(event.detail))),
        run_state=None,
    )


@dataclass(slots=True)
class Row:
    """One schedule, as the ``durable_beat_schedules`` row holds it."""

    id: int
    key: str
    name: str
    definition: Definition
    definition_hash: str
    version: int
    source: Source
    state: ScheduleState
    next_tick_ms: int | None
    next_due_ms: int | None
    last_tick_ms: int | None
    last_outcome: Outcome | None
    failures: int
    epoch: int
    created_at_ms: int
    updated_at_ms: int
    state_reason: StateReason | None = None
    buffered_tick_ms: int | None = None
    streak_from_ms: int | None = None
    config_app: str | None = None

    @classmethod
    def new(cls, row_id: int, definition: Definition, source: Source, now_ms: int) -> Row:
        """A created row, before the decision's values are written onto it."""
        return cls(
            id=row_id,
            key=name_key(definition.name),
            name=definition.name,
            definition=definition,
            definition_hash=definition.definition_hash(),
            version=1,
            source=source,
            state=ScheduleState.ACTIVE,
            next_tick_ms=None,
            next_due_ms=None,
            last_tick_ms=None,
            last_outcome=None,
            failures=0,
            epoch=0,
            created_at_ms=now_ms,
            updated_at_ms=now_ms,
        )

    def write(self, values: Mapping[str, Any]) -> None:
        """Column values as ``store/rules.py`` spells them (SQL's columns)."""
        for column, given in values.items():
            value = given
            if column == "state":
                value = ScheduleState(given)
            elif column == "state_reason":
                value = None if given is None else StateReason(given)
            setattr(self, column, value)

    def replace(self, definition: Definition, version: int) -> None:
        """A new definition (the name's case may change too)."""
        self.name = definition.name
        self.definition = definition
        self.definition_hash = definition.definition_hash()
        self.version = version

    def set_state(
        self,
        state: ScheduleState,
        next_tick_ms: int | None,
        next_due_ms: int | None,
        now_ms: int,
        reason: StateReason | None = None,
    ) -> None:
        self.write(state_values(state, next_tick_ms, next_due_ms, reason))
        self.failures = 0
        self.updated_at_ms = now_ms

    def apply(self, item: Advance, epoch: int, now_ms: int) -> None:
        """A compare-and-set advance that matched."""
        self.next_tick_ms = item.next_tick_ms
        self.next_due_ms = item.next_due_ms
        self.last_tick_ms = item.last_tick_ms
        self.last_outcome = None if item.last_outcome is None else Outcome(item.last_outcome)
        self.failures = item.failures
        self.state = item.state
        self.state_reason = None if item.state_reason is None else StateReason(item.state_reason)
        self.buffered_tick_ms = item.buffered_tick_ms
        self.epoch = epoch
        self.updated_at_ms = now_ms

    def held(self) -> StoredRow:
        """The row as a write decision reads it (``rules.decide_upsert``)."""
        return stored_row(self.record())

    def due(self, namespace: str | None = None) -> DueSchedule:
        return DueSchedule(
            id=self.id,
            name=self.name,
            definition=self.definition,
            version=self.version,
            next_tick_ms=self.next_tick_ms,
            last_tick_ms=self.last_tick_ms,
            failures=self.failures,
            buffered_tick_ms=self.buffered_tick_ms,
            streak_from_ms=self.streak_from_ms,
            namespace=namespace,
        )

    def record(self) -> ScheduleRecord:
        return ScheduleRecord(
            id=self.id,
            name=self.name,
            definition=self.definition,
            definition_hash=self.definition_hash,
            version=self.version,
            source=self.source,
            state=self.state,
            next_tick_ms=self.next_tick_ms,
            next_due_ms=self.next_due_ms,
            last_tick_ms=self.last_tick_ms,
            last_outcome=self.last_outcome,
            failures=self.failures,
            created_at_ms=self.created_at_ms,
            updated_at_ms=self.updated_at_ms,
            state_reason=self.state_reason,
            buffered_tick_ms=self.buffered_tick_ms,
        )


@dataclass(slots=True)
class Fence:
    """The fence row: the newest epoch and, under the store lease, who holds it until when."""

    epoch: int = 0
    holder: str | None = None
    token: str | None = None
    expires: int | None = None

    def acquire_or_renew(
        self, now: int, token: str, holder: str, ttl_ms: int, epoch: int | None
    ) -> LeaseRow:
        """Renew if ``token`` holds an unexpired lease (at ``epoch`` when given), else take a
        free or expired one with a new epoch, else say who leads (``lease/sql.py``)."""
        live = self.expires is not None and self.expires > now
        if self.token == token and live and (epoch is None or self.epoch == epoch):
            self.holder, self.expires = holder, now + ttl_ms
            return self._row(now, leader=True, acquired=False)
        if self.holder is None or self.token is None or not live:
            self.epoch += 1
            self.holder, self.token, self.expires = holder, token, now + ttl_ms
            return self._row(now, leader=True, acquired=True)
        return self._row(now, leader=False, acquired=False)

    def release(self, token: str) -> bool:
        if self.token != token:
            return False
        self.holder = self.token = self.expires = None
        return True

    def _row(self, now: int, *, leader: bool, acquired: bool) -> LeaseRow:
        return LeaseRow(
            leader=leader,
            acquired=acquired,
            epoch=self.epoch,
            holder=self.holder,
            expires_at_ms=self.expires,
            remaining_ms=None if self.expires is None else max(0, self.expires - now),
        )


@dataclass(slots=True)
class Watched:
    """A tick's first ``enqueued`` record the leader watches for redelivery (store rule 11): the
    three columns of ``durable_beat_audit`` that hold it."""

    event: StoredEvent
    recheck_ms: int
    sent_ms: int | None = None
    redeliveries: int = 0

    def move(self, item: Recheck) -> None:
        assert item.recheck_ms is not None  # a record no longer watched is dropped instead
        self.recheck_ms = item.recheck_ms
        self.sent_ms = item.sent_ms
        self.redeliveries = item.redeliveries

    def candidate(self, row: Row | None) -> RedeliveryCandidate:
        event = self.event
        assert event.task_id is not None  # only first enqueued records are watched
        return RedeliveryCandidate(
            record_id=event.id,
            schedule=event.schedule,
            tick_ms=event.tick_ms,
            task_id=event.task_id,
            version=event.version,
            recorded_at_ms=event.recorded_at_ms,
            sent_ms=event.recorded_at_ms if self.sent_ms is None else self.sent_ms,
            redeliveries=self.redeliveries,
            recheck_ms=self.recheck_ms,
            definition=None if row is None else row.definition,
            schedule_version=None if row is None else row.version,
        )
