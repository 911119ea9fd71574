"""``MemoryStore``: the store contract (``store/base.py``) in this process's memory.

For tests of everything above the store (the dispatch round, config sync, the control API, the
worker guard) and for ``FrozenBeat``: no database, no files, and a clock that can be injected.
The contract suite (``tests/integration/test_store_contract.py``) holds it to the same rules as
the SQL store, so a test that passes here means the same thing it would on SQL.

How each rule is kept:

1. **Time.** ``now_ms()`` is the injected clock (default: this host's, in ms).
2. **Due rows.** ``claim_due`` picks active rows with ``next_due_ms <= now_ms`` earliest first,
   and holds nothing afterwards, as on SQL.
3. **Audit before advance.** ``settle`` writes the events and applies the advances under the
   store's one lock, all or nothing; ``enqueued`` events are unique per task id (a second one is
   dropped).
4. **Fencing.** Every fenced write checks its epoch against the fence under that same lock, so
   no epoch bump can come between the check and the write.
5. **Compare-and-set advance.** Checked (``rules.advance_applies``) and applied under that lock,
   item by item.
6. **History outlives schedules.** Events are kept by lower-cased schedule name.

What to write is never decided here: ``upsert``, ``sync_config``, ``set_state`` and
``prune_history`` ask ``store/rules.py``, as the SQL store does; this module only finds and
stores rows. Names are case-insensitive exactly as on SQL.
The store also carries the fence row the store lease uses (``lease_acquire_or_renew``), so
``MemoryLease`` (``lease/memory.py``) elects one leader among lease objects sharing a store.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from celery_durable_beat.clock import SystemClock
from celery_durable_beat.exceptions import ScheduleNotFound
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
from celery_durable_beat.store.memory_rows import Fence, Row, Watched, to_stored
from celery_durable_beat.store.rules import (
    advance_applies,
    check_action,
    check_advances,
    check_at_least,
    check_backfill,
    check_changes,
    check_manual,
    decide_change,
    decide_upsert,
    is_first_enqueued,
    prunable,
    prunable_actions,
    refuse_stale,
    state_values,
    storable_key,
)
from celery_durable_beat.store.values import (
    ActionEntry,
    Advance,
    AuditEvent,
    ConfigChange,
    DueSchedule,
    LeaderInfo,
    Recheck,
    RedeliveryCandidate,
    ScheduleRecord,
    StoredAction,
    StoredDigest,
    StoredEvent,
    UpsertDecision,
    UpsertOutcome,
    UpsertResult,
)

if TYPE_CHECKING:
    from celery_durable_beat.store.base import Store

RunStateLookup = Callable[[str], "str | None"]
"""Task id → run state (``run_state`` of history); set by an in-memory runs backend."""


def _no_run_state(task_id: str) -> str | None:
    return None


class MemoryStore:
    """Schedules, audit history and the fence in a dict, behind one lock."""

    settles_beside_claims = True
    """Rule 12: every call takes the one lock, so a settle on another thread is safe."""

    def __init__(
        self,
        clock: Callable[[], int] | None = None,
        *,
        url: str = "memory://",
        namespace: str | None = None,
    ) -> None:
        self.url = url
        # One namespace per store object: another namespace is another MemoryStore (SPEC §16).
        self.namespace = namespace
        self._clock = clock or SystemClock().now_ms
        self._lock = threading.RLock()
        self._rows: dict[str, Row] = {}  # by lower-cased name
        self._events: dict[str, list[StoredEvent]] = {}  # by lower-cased name, oldest first
        self._enqueued: dict[str, StoredEvent] = {}  # by task id
        self._watched: dict[int, Watched] = {}  # rule 11, by record id
        self._fence = Fence()
        self._next_row_id = 1
        self._next_event_id = 1
        self._actions: dict[str, list[StoredAction]] = {}  # by lower-cased name, oldest first
        self._next_action_id = 1
        self._run_state: RunStateLookup = _no_run_state

    def __repr__(self) -> str:
        return f"MemoryStore({len(self._rows)} schedules)"

    def attach_run_states(self, lookup: RunStateLookup) -> None:
        """Where ``history``/``find_enqueued`` read each event's run state (a runs backend)."""
        self._run_state = lookup

    # -- time and the round -------------------------------------------------------------------
    def now_ms(self) -> int:
        return int(self._clock())

    def earliest_due_ms(self) -> int | None:
        with self._lock:
            due = [row.next_due_ms for row in self._rows.values() if row.next_due_ms is not None]
        return min(due, default=None)

    def clock_and_earliest_due(self) -> tuple[int, int | None]:
        return self.now_ms(), self.earliest_due_ms()

    @contextmanager
    def claim_due(
        self, now_ms: int, limit: int, excluding: Collection[int] = ()
    ) -> Iterator[MemoryClaim]:
        check_at_least("claim_due limit", limit, 1)
        skipped = frozenset(excluding)
        with self._lock:
            rows = sorted(
                (
                    row
                    for row in self._rows.values()
                    if row.next_due_ms is not None
                    and row.next_due_ms <= now_ms
                    and row.id not in skipped
                ),
                key=lambda row: (row.next_due_ms, row.id),
            )[:limit]
            due = [row.due(self.namespace) for row in rows]
        yield MemoryClaim(self, due)

    def settle(
        self, events: Sequence[AuditEvent], advances: Sequence[Advance], epoch: int
    ) -> list[bool]:
        if not events and not advances:
            return []
        check_advances(advances)
        with self._lock:
            now = self._check_fence(epoch)
            self._insert_events([_Pending(event, epoch, now) for event in events])
            by_id = {row.id: row for row in self._rows.values()} if advances else {}
            applied: list[bool] = []
            for item in advances:
                row = by_id.get(item.schedule_id)
                moves = row is not None and advance_applies(item, row.state, row.next_tick_ms)
                if moves and row is not None:
                    row.apply(item, epoch, now)
                applied.append(moves)
        return applied

    def register_epoch(self, epoch: int) -> None:
        with self._lock:
            self._fence.epoch = max(self._fence.epoch, epoch)

    def leader_info(self) -> LeaderInfo:
        with self._lock:
            fence = self._fence
            return LeaderInfo(holder=fence.holder, epoch=fence.epoch, expires_at_ms=fence.expires)

    # -- the store lease (lease/memory.py) ------------------------------------------------------
    def lease_acquire_or_renew(
        self, token: str, holder: str, ttl_ms: int, epoch: int | None = None
    ) -> LeaseRow:
        """The compare-and-set rules of ``lease/sql.py`` on the in-memory fence row."""
        with self._lock:
            return self._fence.acquire_or_renew(self.now_ms(), token, holder, ttl_ms, epoch)

    def lease_release(self, token: str) -> bool:
        with self._lock:
            return self._fence.release(token)

    # -- schema: nothing to create or upgrade ---------------------------------------------------
    def ensure_schema(self) -> None:
        """Memory has no schema; always current."""

    def migrate(self) -> str:
        """Nothing to migrate; the name says which store answered."""
        return "memory"

    # -- definitions --------------------------------------------------------------------------
    def get(self, name: str) -> ScheduleRecord | None:
        with self._lock:
            row = self._rows.get(name_key(name))
            return None if row is None else row.record()

    def list_schedules(self) -> list[ScheduleRecord]:
        with self._lock:
            rows = sorted(self._rows.values(), key=lambda row: (row.key, row.id))
            return [row.record() for row in rows]

    def page_schedules(
        self, contains: str, state: ScheduleState | None, offset: int, limit: int
    ) -> tuple[list[ScheduleRecord], int]:
        needle = contains.lower()
        matched = [
            record
            for record in self.list_schedules()
            if needle in record.name.lower() and (state is None or record.state is state)
        ]
        return matched[offset : offset + limit], len(matched)

    def upsert(
        self, definition: Definition, source: Source, first_tick_ms: int | None, now_ms: int
    ) -> UpsertResult:
        key = storable_key(definition.name)
        stored = _detached(definition)
        with self._lock:
            row = self._rows.get(key)
            held = None if row is None else row.held()
            decision = decide_upsert(held, stored, source, first_tick_ms)
            self._write_decision(key, stored, source, decision, now_ms)
            if decision.dropped is not None:  # an @at already past when created
                self._insert_events([_Pending(decision.dropped, self._fence.epoch, now_ms)])
        return UpsertResult(decision.name, decision.status, decision.version)

    def definition_digests(self, names: Sequence[str]) -> list[StoredDigest]:
        keys = {name_key(name) for name in names}
        with self._lock:
            rows = [
                row
                for key, row in self._rows.items()
                if key in keys
                or (row.source is Source.CONFIG and row.state is not ScheduleState.ARCHIVED)
            ]
        return [
            StoredDigest(r.name, r.source, r.state, r.definition_hash, r.config_app) for r in rows
        ]

    def sync_config(
        self,
        changes: Sequence[ConfigChange],
        epoch: int,
        now_ms: int,
        app: str | None = None,
    ) -> list[UpsertResult]:
        """Rule 7 under the store's one lock: fence first, decide every change, then write."""
        keys = check_changes(changes)
        with self._lock:
            self._check_fence(epoch)
            found = [self._rows.get(key) for key in keys]
            decisions = [
                decide_change(None if row is None else row.held(), change, now_ms)
                for row, change in zip(found, changes, strict=True)
            ]
            for key, change, decision in zip(keys, changes, decisions, strict=True):
                stored = None if change.definition is None else _detached(change.definition)
                self._write_decision(key, stored, Source.CONFIG, decision, now_ms, epoch)
                if decision.dropped is not None:
                    self._insert_events([_Pending(decision.dropped, epoch, now_ms)])
                row = self._rows.get(key)
                if app is not None and row is not None and decision.status in _KEPT:
                    row.config_app = app if row.source is Source.CONFIG else row.config_app
        return [UpsertResult(d.name, d.status, d.version) for d in decisions]

    def set_state(
        self,
        name: str,
        state: ScheduleState,
        now_ms: int,
        next_tick_ms: int | None = None,
        next_due_ms: int | None = None,
        reason: StateReason | None = None,
    ) -> ScheduleRecord:
        state_values(state, next_tick_ms, next_due_ms, reason)  # refuses what SQL refuses
        with self._lock:
            row = self._rows.get(name_key(name))
            if row is None:
                raise ScheduleNotFound(name)
            row.set_state(state, next_tick_ms, next_due_ms, now_ms, reason)
            return row.record()

    def delete(self, name: str) -> bool:
        with self._lock:
            return self._rows.pop(name_key(name), None) is not None

    def record_manual(self, event: AuditEvent) -> None:
        """Rule 10: no epoch check; the record carries the fence's newest epoch."""
        check_manual(event)
        with self._lock:
            self._insert_events([_Pending(event, self._fence.epoch, self.now_ms())])

    def record_backfill(self, events: Sequence[AuditEvent]) -> None:
        """Rule 10 for a backfill's records: unfenced, a second ``enqueued`` one dropped."""
        check_backfill(events)
        with self._lock:
            now = self.now_ms()
            self._insert_events([_Pending(event, self._fence.epoch, now) for event in events])

    def record_action(self, entry: ActionEntry, keep: int) -> None:
        """Rule 12: the row at the store's clock, then the schedule's rows past ``keep``."""
        check_action(entry)
        check_at_least("keep", keep, 1)
        with self._lock:
            key = name_key(entry.schedule)
            rows = self._actions.setdefault(key, [])
            rows.append(
                StoredAction(
                    self._next_action_id,
                    self.now_ms(),
                    entry.actor,
                    entry.action,
                    entry.schedule,
                    entry.reason,
                )
            )
            self._next_action_id += 1
            drop = prunable_actions([row.id for row in rows], keep)
            self._actions[key] = [row for row in rows if row.id not in drop]

    def actions(
        self, name: str | None, limit: int, before_id: int | None = None
    ) -> list[StoredAction]:
        check_at_least("actions limit", limit, 1)
        with self._lock:
            if name is None:
                found = [row for rows in self._actions.values() for row in rows]
            else:
                found = list(self._actions.get(name_key(name), []))
        found = [row for row in found if before_id is None or row.id < before_id]
        return sorted(found, key=lambda row: row.id, reverse=True)[:limit]

    def enqueued_among(self, task_ids: Sequence[str]) -> set[str]:
        with self._lock:
            return {task_id for task_id in task_ids if task_id in self._enqueued}

    def history_extent(self, name: str) -> tuple[int, int | None]:
        with self._lock:
            events = self._events.get(name_key(name), [])
            return len(events), min((e.tick_ms for e in events), default=None)

    # -- history ------------------------------------------------------------------------------
    def history(self, name: str, limit: int, before_id: int | None = None) -> list[StoredEvent]:
        check_at_least("history limit", limit, 1)
        with self._lock:
            events = self._events.get(name_key(name), [])
            page: list[StoredEvent] = []
            for event in reversed(events):
                if before_id is not None and event.id >= before_id:
                    continue
                page.append(event)
                if len(page) == limit:
                    break
        return [self._with_run_state(event) for event in page]

    def find_enqueued(self, task_id: str) -> StoredEvent | None:
        with self._lock:
            event = self._enqueued.get(task_id)
        return None if event is None else self._with_run_state(event)

    def newest_enqueued(self, name: str, before_tick_ms: int) -> StoredEvent | None:
        """The newest automatic ``enqueued`` event of ``name`` with a tick before the given one
        (what an in-memory runs backend answers ``previous_tick`` from)."""
        with self._lock:
            for event in reversed(self._events.get(name_key(name), [])):
                if (
                    event.outcome is Outcome.ENQUEUED
                    and event.trigger is Trigger.AUTO
                    and event.tick_ms < before_tick_ms
                ):
                    return self._with_run_state(event)
        return None

    def prune_history(self, names: Sequence[str], keep: int) -> int:
        """Rule 8 as ``rules.prunable`` chooses, schedule by schedule."""
        check_at_least("keep", keep, 0)
        removed = 0
        with self._lock:
            for key in sorted({name_key(name) for name in names}):
                events = self._events.get(key, [])
                row = self._rows.get(key)
                next_tick = None if row is None else row.next_tick_ms
                drop = prunable(events, keep, next_tick, self._watched.keys())
                if drop:
                    self._events[key] = [event for event in events if event.id not in drop]
                    for event in events:
                        if event.id in drop and self._enqueued.get(event.task_id or "") is event:
                            self._enqueued.pop(event.task_id or "", None)
                    removed += len(drop)
        return removed

    # -- redelivery (rule 11) ---------------------------------------------------------------
    def redelivery_candidates(self, now_ms: int, limit: int) -> list[RedeliveryCandidate]:
        check_at_least("redelivery_candidates limit", limit, 1)
        with self._lock:
            due = sorted(
                (w for w in self._watched.values() if w.recheck_ms <= now_ms),
                key=lambda w: (w.recheck_ms, w.event.id),
            )[:limit]
            return [w.candidate(self._rows.get(name_key(w.event.schedule))) for w in due]

    def settle_redeliveries(
        self, events: Sequence[AuditEvent], rechecks: Sequence[Recheck], epoch: int
    ) -> None:
        with self._lock:
            now = self._check_fence(epoch)
            self._insert_events([_Pending(event, epoch, now) for event in events])
            for item in rechecks:
                watched = self._watched.get(item.record_id)
                if watched is not None and item.recheck_ms is None:
                    del self._watched[item.record_id]
                elif watched is not None:
                    watched.move(item)

    # -- status -------------------------------------------------------------------------------
    def counts_by_state(self) -> dict[str, int]:
        counts = {state.value: 0 for state in ScheduleState}
        with self._lock:
            for row in self._rows.values():
                counts[row.state.value] += 1
        return counts

    def due_backlog(self, now_ms: int) -> int:
        with self._lock:
            return sum(
                1
                for row in self._rows.values()
                if row.next_due_ms is not None and row.next_due_ms <= now_ms
            )

    def close(self) -> None:
        """Nothing to release; the data stays until the object goes."""

    # -- internals (callers hold the lock) ------------------------------------------------------
    def _check_fence(self, epoch: int) -> int:
        refuse_stale(epoch, self._fence.epoch)
        return self.now_ms()

    def _write_decision(
        self,
        key: str,
        definition: Definition | None,
        source: Source,
        decision: UpsertDecision,
        now_ms: int,
        epoch: int | None = None,
    ) -> None:
        """Store what a rule decided: a created row, a changed definition, the columns."""
        if decision.values is None:
            return
        row = self._rows.get(key)
        if row is None and definition is not None:
            row = self._rows[key] = Row.new(self._next_row_id, definition, source, now_ms)
            self._next_row_id += 1
        elif row is not None and definition is not None:
            row.replace(definition, decision.version)
        assert row is not None  # an archive decision is made of a stored row only
        row.write(decision.values)
        row.updated_at_ms = now_ms
        if epoch is not None:
            row.epoch = epoch

    def _insert_events(self, pending: Sequence[_Pending]) -> None:
        for item in pending:
            event = item.event
            first = is_first_enqueued(event)
            if first and event.task_id in self._enqueued:
                continue  # rule 3: a replayed enqueued record is ignored, never an error
            stored = to_stored(self._next_event_id, event, item.epoch, item.now)
            self._next_event_id += 1
            self._events.setdefault(name_key(event.schedule), []).append(stored)
            if first and event.task_id is not None:
                self._enqueued[event.task_id] = stored
                if event.recheck_ms is not None:  # rule 11
                    self._watched[stored.id] = Watched(stored, event.recheck_ms)

    def _with_run_state(self, event: StoredEvent) -> StoredEvent:
        if event.task_id is None:
            return event
        state = self._run_state(event.task_id)
        if state is None:
            return event
        return StoredEvent(**{**event.__dict__, "run_state": state})


_KEPT = (UpsertOutcome.CREATED, UpsertOutcome.UPDATED, UpsertOutcome.UNCHANGED)
"""Config sync's decisions that keep a row in the config: it carries the syncing app's name."""


def _detached(definition: Definition) -> Definition:
    """A copy through the JSON the SQL store keeps, so a caller's later change cannot reach it."""
    return Definition.from_json(definition.name, definition.to_json())


@dataclass(frozen=True)
class _Pending:
    """An event stamped with the epoch and time of its write."""

    event: AuditEvent
    epoch: int
    now: int


@dataclass
class MemoryClaim:
    """The due rows of one round; it holds nothing."""

    store: MemoryStore
    schedules: Sequence[DueSchedule]

    def enqueued_task_ids(self, task_ids: Sequence[str]) -> set[str]:
        with self.store._lock:
            return {task_id for task_id in task_ids if task_id in self.store._enqueued}


if TYPE_CHECKING:

    def _conforms(store: MemoryStore) -> Store:
        """mypy proves here that MemoryStore keeps the whole Store protocol."""
        return store
