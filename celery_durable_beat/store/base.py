"""The store contract: what the dispatch round, config sync and the control API need of storage.

Rules every backend keeps (the contract tests in ``tests/integration/test_store_contract.py`` hold
each one to them):

1. **Time.** ``now_ms()`` is the database's clock. The leader judges what is due by it.
2. **Due rows.** ``claim_due(now_ms, limit)`` yields at most ``limit`` active schedules whose
   ``next_due_ms <= now_ms``, earliest first, from one indexed query. Work follows what is due:
   idle rows are never read. Paused, archived and quarantined rows have ``next_due_ms`` NULL.
   The read commits before the block runs: **nothing is locked or held while the round
   publishes** (SPEC §3), so the CLI, the console and the workers' store-backed claims never
   wait on a round. Two beats may therefore read the same rows. Only the lease holder runs
   rounds; a leader that stalled past its lease and wakes mid-round may publish ticks the new
   leader also publishes — the same deterministic task ids, which the worker guard absorbs — but
   its ``settle`` is refused by the fence (rule 4) or, for a row the new leader already moved,
   by the compare-and-set (rule 5). A tick is never lost and never advanced twice.
3. **Audit before advance.** ``settle(events, advances, epoch)`` writes the round's audit events
   and then its advances in one short transaction: an advance never commits without the records
   of what it moves past. An ``enqueued`` event is unique per task id: a second one for the same
   task id is ignored, never an error, so replaying a tick is safe.
4. **Fencing.** Every audit write and every advance carries the writer's epoch. The store keeps
   the newest epoch it has seen; a write with an older one raises ``StaleEpoch`` and changes
   nothing. The epoch is checked inside the writing statement (PostgreSQL) or under the lock
   that an epoch bump also needs (SQLite's write lock, the memory store's lock), never by a
   read that a bump could overtake before the write.
5. **Compare-and-set advance.** ``advance`` moves a schedule only if its ``next_tick_ms`` still
   equals what the round read; otherwise that item reports ``False`` and nothing changes.
6. **History outlives schedules.** Audit events are keyed by schedule name, not by row id.
7. **Config sync is bulk and fenced.** ``definition_digests()`` reads every schedule's name,
   source, state and definition hash in one query; ``sync_config(changes, epoch, now_ms)``
   applies a batch of differences in one transaction with a constant number of statements,
   whatever its size. Its epoch is checked under a lock on the fence that orders it against
   ``register_epoch`` (never by a read before the write): an older epoch raises ``StaleEpoch``
   and writes nothing. Each change is decided against the row as it is inside that transaction,
   by ``decide_change``: an API-owned row is ``ignored``; an unchanged, non-archived one moves
   nothing; a changed one gets version + 1, ``first_tick_ms`` and failures 0; a removed one is
   ``archived``. A re-plan that drops a tick already due (active, ``next_due_ms <= now_ms``)
   records a ``skipped`` event with reason ``replanned`` in the same transaction.
8. **Pruning is bounded per statement, not per schedule.** ``prune_history`` removes the surplus
   of many schedules with one statement per ``PRUNE_CHUNK`` names, so its cost follows the
   number of chunks, never one round trip per schedule.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from celery_durable_beat.exceptions import InvalidArgument
from celery_durable_beat.ids import name_key
from celery_durable_beat.model import (
    Definition,
    Outcome,
    Reason,
    ScheduleState,
    Source,
    StateReason,
    Trigger,
)
from celery_durable_beat.policy import due_ms

PRUNE_CHUNK = 500
"""Schedules whose surplus history one pruning statement removes (rule 8)."""


@dataclass(frozen=True)
class DueSchedule:
    """A schedule the round must look at now."""

    id: int
    name: str
    definition: Definition
    version: int
    next_tick_ms: int | None
    """None only when a ``buffer_one`` tick is held past the schedule's ``end_at``."""
    last_tick_ms: int | None
    failures: int
    buffered_tick_ms: int | None = None
    """``buffer_one``: the tick waiting for the previous run to end."""
    streak_from_ms: int | None = None
    """``pause_on_failure`` counts failed runs of ticks at or after this instant only."""


@dataclass(frozen=True)
class ScheduleRecord:
    """A whole schedule row, for the control surfaces."""

    id: int
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
    created_at_ms: int
    updated_at_ms: int
    state_reason: StateReason | None = None
    buffered_tick_ms: int | None = None


@dataclass(frozen=True)
class AuditEvent:
    """One audit record; ``detail`` holds counts and ranges, never payloads or error text."""

    schedule: str
    tick_ms: int
    task_id: str | None
    trigger: Trigger
    outcome: Outcome
    reason: str | None = None
    lag_ms: int | None = None
    version: int = 0
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StoredEvent:
    """An audit record as read back, with the run state the worker side tracked for it."""

    id: int
    schedule: str
    tick_ms: int
    task_id: str | None
    trigger: Trigger
    outcome: Outcome
    reason: str | None
    lag_ms: int | None
    version: int
    epoch: int
    recorded_at_ms: int
    detail: Mapping[str, Any]
    run_state: str | None


@dataclass(frozen=True)
class Advance:
    """Move one schedule on, if it is still where the round found it."""

    schedule_id: int
    expected_next_tick_ms: int | None
    next_tick_ms: int | None
    next_due_ms: int | None
    last_tick_ms: int | None
    last_outcome: Outcome | None
    failures: int
    state: ScheduleState = ScheduleState.ACTIVE
    state_reason: StateReason | None = None
    buffered_tick_ms: int | None = None


@dataclass(frozen=True)
class UpsertResult:
    """What an upsert did: ``created``, ``updated`` or ``unchanged``."""

    name: str
    status: str
    version: int


@dataclass(frozen=True)
class StoredDigest:
    """What config sync reads of every stored schedule to find the differences (rule 7)."""

    name: str
    source: Source
    state: ScheduleState
    definition_hash: str


@dataclass(frozen=True)
class ConfigChange:
    """One difference config sync writes: a definition to create or update, or (``definition``
    None) a config schedule to archive because it left the config."""

    name: str
    definition: Definition | None = None
    first_tick_ms: int | None = None


@dataclass(frozen=True)
class SyncRow:
    """A schedule row as ``sync_config`` finds it inside its transaction."""

    id: int
    name: str
    source: Source
    state: ScheduleState
    definition_hash: str
    version: int
    next_tick_ms: int | None
    next_due_ms: int | None
    enabled: bool
    state_reason: StateReason | None = None
    buffered_tick_ms: int | None = None


@dataclass(frozen=True)
class SyncDecision:
    """What ``sync_config`` does to one row: ``status`` is created, updated, unchanged, archived
    or ignored; ``values`` the columns to write (None: nothing); ``dropped`` the ``replanned``
    record of a due tick the re-plan drops."""

    name: str
    status: str
    version: int
    values: dict[str, Any] | None = None
    dropped: AuditEvent | None = None


@dataclass(frozen=True)
class LeaderInfo:
    """The store's view of leadership: the store lease row, or the epoch a Redis lease set."""

    holder: str | None
    epoch: int
    expires_at_ms: int | None


class Claim(Protocol):
    """The due rows of one round, already read and committed: a claim holds nothing."""

    schedules: Sequence[DueSchedule]

    def enqueued_task_ids(self, task_ids: Sequence[str]) -> set[str]:
        """Which of these task ids already have an ``enqueued`` record."""


class Store(Protocol):
    """Durable schedules, audit history and the fencing epoch."""

    url: str

    def now_ms(self) -> int:
        """The database's clock, UTC epoch milliseconds."""

    def earliest_due_ms(self) -> int | None:
        """The smallest ``next_due_ms`` of any active schedule (one index probe)."""

    def clock_and_earliest_due(self) -> tuple[int, int | None]:
        """``now_ms()`` and ``earliest_due_ms()`` together, in one round trip: the idle round."""

    def claim_due(self, now_ms: int, limit: int) -> AbstractContextManager[Claim]:
        """The due rows of one round (see rule 2)."""

    def settle(
        self, events: Sequence[AuditEvent], advances: Sequence[Advance], epoch: int
    ) -> list[bool]:
        """A round's audit events, then its advances, in one short transaction (rules 3-5);
        True where an advance applied. Raise StaleEpoch if fenced: then nothing is written."""

    def advance(self, advances: Sequence[Advance], epoch: int) -> list[bool]:
        """Compare-and-set each advance; True where it applied. Raise StaleEpoch if fenced."""

    def record(self, events: Sequence[AuditEvent], epoch: int) -> None:
        """Write audit events outside a claim (manual runs, control actions)."""

    # -- schema -----------------------------------------------------------------------------
    def ensure_schema(self) -> None:
        """Create the schema on an empty database; raise SchemaOutdated on an old one."""

    def migrate(self) -> str:
        """Create or upgrade the schema to the newest revision; return that revision."""

    # -- definitions (config sync and the control API) ------------------------------------
    def get(self, name: str) -> ScheduleRecord | None:
        """The schedule with this name, compared case-insensitively."""

    def list_schedules(self) -> list[ScheduleRecord]:
        """Every schedule, archived ones included, ordered by name (control surfaces only)."""

    def page_schedules(
        self, contains: str, state: ScheduleState | None, offset: int, limit: int
    ) -> tuple[list[ScheduleRecord], int]:
        """One page of ``list_schedules`` order, and how many schedules match in all.

        ``contains`` matches names case-insensitively as plain text (``%`` and ``_`` are not
        wildcards); ``""`` matches every name; ``state`` None matches every state. Why: the
        console shows 100 rows of 10,000 without reading the other 9,900.
        """

    def upsert(
        self, definition: Definition, source: Source, first_tick_ms: int | None, now_ms: int
    ) -> UpsertResult:
        """Create, update (version + 1, re-planned to ``first_tick_ms``) or leave unchanged.

        A changed or re-activated schedule takes state ``active`` (``paused`` when the
        definition says ``enabled: false``), ``next_tick_ms = first_tick_ms`` and failures 0.
        An archived schedule whose definition is unchanged is re-activated the same way.
        """

    def archive_missing(self, keep_names: Sequence[str], source: Source, now_ms: int) -> list[str]:
        """Archive every non-archived schedule of ``source`` whose name is not in ``keep_names``."""

    def definition_digests(self) -> list[StoredDigest]:
        """Name, source, state and definition hash of every schedule, in one read (rule 7)."""

    def sync_config(
        self, changes: Sequence[ConfigChange], epoch: int, now_ms: int
    ) -> list[UpsertResult]:
        """Apply one batch of config differences, fenced (rule 7); one result per change."""

    def set_state(
        self,
        name: str,
        state: ScheduleState,
        now_ms: int,
        next_tick_ms: int | None = None,
        next_due_ms: int | None = None,
        reason: StateReason | None = None,
    ) -> ScheduleRecord:
        """Change state (pause, resume, archive, quarantine); resets failures. Raises
        ScheduleNotFound. ``next_due_ms`` must be None unless the state is ``active``; an
        active schedule without a next tick is past its ``end_at``. ``reason`` says why a
        paused schedule is paused; activating one starts its failure streak at its next tick."""

    def delete(self, name: str) -> bool:
        """Remove the schedule row; its history stays."""

    # -- history ------------------------------------------------------------------------------
    def history(self, name: str, limit: int, before_id: int | None = None) -> list[StoredEvent]:
        """Audit events of a schedule, newest first, ids below ``before_id`` when given."""

    def find_enqueued(self, task_id: str) -> StoredEvent | None:
        """The ``enqueued`` record of a task id, if any (manual-run idempotency)."""

    def prune_history(self, names: Sequence[str], keep: int) -> int:
        """Keep the newest ``keep`` events of each named schedule; return how many were removed
        (one statement per ``PRUNE_CHUNK`` names, rule 8)."""

    # -- status -------------------------------------------------------------------------------
    def counts_by_state(self) -> dict[str, int]:
        """How many schedules are in each state."""

    def due_backlog(self, now_ms: int) -> int:
        """How many active schedules are due at ``now_ms``."""

    def leader_info(self) -> LeaderInfo:
        """The fencing epoch and, for the store lease, who holds it until when."""

    def register_epoch(self, epoch: int) -> None:
        """Raise the newest epoch seen to ``epoch`` (never lowers it)."""

    def close(self) -> None:
        """Release connections; idempotent."""


def iter_chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    """Slices of at most ``size`` items, for batched writes."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def check_advances(advances: Sequence[Advance]) -> None:
    """Refuse a malformed batch before any backend writes it: every store keeps rule 5 alike."""
    seen: set[int] = set()
    for item in advances:
        if item.schedule_id in seen:
            raise InvalidArgument(f"schedule id {item.schedule_id} is advanced twice in one batch")
        seen.add(item.schedule_id)
        active = item.state is ScheduleState.ACTIVE
        has_tick = item.next_tick_ms is not None or item.buffered_tick_ms is not None
        if (active and has_tick) != (item.next_due_ms is not None):
            raise InvalidArgument(
                f"schedule id {item.schedule_id}: next_due_ms must be set exactly when the "
                f"state is active with a next tick; got state {item.state.value}, next tick "
                f"{item.next_tick_ms} and next_due_ms {item.next_due_ms}"
            )


def state_values(
    state: ScheduleState,
    next_tick_ms: int | None,
    next_due_ms: int | None,
    reason: StateReason | None,
) -> dict[str, Any]:
    """The columns ``set_state`` writes, checked alike on every backend: only an active schedule
    with a next tick is due; a reason only for a paused one; activating starts the failure
    streak at the next tick; archiving drops a ``buffer_one`` tick (it would never fire)."""
    active = state is ScheduleState.ACTIVE
    if (active and next_tick_ms is not None) != (next_due_ms is not None):
        raise InvalidArgument(
            f"a {state.value} schedule with next tick {next_tick_ms} cannot have next_due_ms "
            f"{next_due_ms}: it is set exactly when the schedule is active with a next tick"
        )
    values: dict[str, Any] = {
        "state": state.value,
        "state_reason": reason.value if reason and state is ScheduleState.PAUSED else None,
        "next_tick_ms": next_tick_ms,
        "next_due_ms": next_due_ms,
    }
    if active:
        values["streak_from_ms"] = next_tick_ms
    if state is ScheduleState.ARCHIVED:
        values["buffered_tick_ms"] = None
    return values


def check_changes(changes: Sequence[ConfigChange]) -> list[str]:
    """The keys of a batch of config changes; refuse a batch naming one schedule twice."""
    keys = [name_key(change.name) for change in changes]
    if len(set(keys)) != len(keys):
        raise InvalidArgument("a batch of config changes names one schedule twice")
    return keys


def plan_values(definition: Definition, first_tick_ms: int | None) -> dict[str, Any]:
    """State, next tick, due instant and failures of a created, changed or re-activated row
    (every backend writes these same values). ``first_tick_ms`` None: past its ``end_at``."""
    active = definition.enabled
    due = None
    if active and first_tick_ms is not None:
        due = due_ms(definition.name, definition, first_tick_ms)
    return {
        "state": ScheduleState.ACTIVE if active else ScheduleState.PAUSED,
        "state_reason": None if active else StateReason.DISABLED,
        "next_tick_ms": first_tick_ms,
        "next_due_ms": due,
        "failures": 0,
        "buffered_tick_ms": None,
        "streak_from_ms": first_tick_ms,
    }


def decide_change(row: SyncRow | None, change: ConfigChange, now_ms: int) -> SyncDecision:
    """Rule 7 for one change, the same on every backend (``upsert``'s rules, plus the
    ``replanned`` record): config never touches an API row; an archived, otherwise unchanged
    row comes back at its version; an operator's pause survives a change unless the change is
    to ``enabled`` itself."""
    definition = change.definition
    if definition is None:
        if row is None or row.source is not Source.CONFIG or row.state is ScheduleState.ARCHIVED:
            return SyncDecision(change.name, "unchanged", 0 if row is None else row.version)
        values: dict[str, Any] = {
            "state": ScheduleState.ARCHIVED,
            "next_tick_ms": None,
            "next_due_ms": None,
        }
        return SyncDecision(row.name, "archived", row.version, {**values, "failures": 0})
    values = plan_values(definition, change.first_tick_ms)
    if row is None:
        return SyncDecision(definition.name, "created", 1, values)
    if row.source is Source.API:
        return SyncDecision(row.name, "ignored", row.version)
    archived = row.state is ScheduleState.ARCHIVED
    same = row.definition_hash == definition.definition_hash()
    if same and not archived:
        return SyncDecision(row.name, "unchanged", row.version)
    if row.state is ScheduleState.PAUSED and row.enabled == definition.enabled:
        values.update(state=ScheduleState.PAUSED, state_reason=row.state_reason, next_due_ms=None)
    version = row.version if same else row.version + 1
    return SyncDecision(definition.name, "updated", version, values, _dropped(row, now_ms))


def _dropped(row: SyncRow, now_ms: int) -> AuditEvent | None:
    """The ``replanned`` record of a due tick that a re-plan replaces (SPEC §3): the tick
    ``buffer_one`` held, else the next tick when it is already due."""
    tick = row.buffered_tick_ms
    if tick is None and row.state is ScheduleState.ACTIVE and row.next_tick_ms is not None:
        due = row.next_due_ms is not None and row.next_due_ms <= now_ms
        tick = row.next_tick_ms if due else None
    if tick is None:
        return None
    return AuditEvent(
        schedule=row.name,
        tick_ms=tick,
        task_id=None,
        trigger=Trigger.AUTO,
        outcome=Outcome.SKIPPED,
        reason=Reason.REPLANNED.value,
        version=row.version,
        detail={"count": 1},
    )
