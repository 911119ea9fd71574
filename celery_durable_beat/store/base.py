"""The store contract: what the dispatch round, config sync and the control API need of storage.

Rules every backend keeps (the contract tests in ``tests/integration/test_store_contract.py`` hold
each one to them):

1. **Time.** ``now_ms()`` is the database's clock. The leader judges what is due by it.
2. **Due rows.** ``claim_due(now_ms, limit)`` yields at most ``limit`` active schedules whose
   ``next_due_ms <= now_ms``, earliest first, from one indexed query. Work follows what is due:
   idle rows are never read. Paused, archived and quarantined rows have ``next_due_ms`` NULL.
   On PostgreSQL the rows stay locked (``FOR UPDATE SKIP LOCKED``) until the claim ends, so a
   second beat cannot work on them meanwhile.
3. **Audit before advance.** ``Claim.record`` writes audit events and commits them when the claim
   ends. An ``enqueued`` event is unique per task id: a second one for the same task id is
   ignored, never an error, so replaying a tick is safe.
4. **Fencing.** Every audit write and every advance carries the writer's epoch. The store keeps
   the newest epoch it has seen; a write with an older one raises ``StaleEpoch`` and changes
   nothing.
5. **Compare-and-set advance.** ``advance`` moves a schedule only if its ``next_tick_ms`` still
   equals what the round read; otherwise that item reports ``False`` and nothing changes.
6. **History outlives schedules.** Audit events are keyed by schedule name, not by row id.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from celery_durable_beat.model import (
    Definition,
    Outcome,
    ScheduleState,
    Source,
    Trigger,
)


@dataclass(frozen=True)
class DueSchedule:
    """A schedule the round must look at now."""

    id: int
    name: str
    definition: Definition
    version: int
    next_tick_ms: int
    last_tick_ms: int | None
    failures: int


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
    expected_next_tick_ms: int
    next_tick_ms: int
    next_due_ms: int | None
    last_tick_ms: int | None
    last_outcome: Outcome | None
    failures: int
    state: ScheduleState = ScheduleState.ACTIVE


@dataclass(frozen=True)
class UpsertResult:
    """What an upsert did: ``created``, ``updated`` or ``unchanged``."""

    name: str
    status: str
    version: int


@dataclass(frozen=True)
class LeaderInfo:
    """The store's view of leadership: the store lease row, or the epoch a Redis lease set."""

    holder: str | None
    epoch: int
    expires_at_ms: int | None


class Claim(Protocol):
    """The due rows of one round; audit events recorded here commit when the claim ends."""

    schedules: Sequence[DueSchedule]

    def enqueued_task_ids(self, task_ids: Sequence[str]) -> set[str]:
        """Which of these task ids already have an ``enqueued`` record."""

    def record(self, events: Sequence[AuditEvent], epoch: int) -> None:
        """Write audit events (``enqueued`` ones once per task id); raise StaleEpoch if fenced."""


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

    def upsert(
        self, definition: Definition, source: Source, first_tick_ms: int, now_ms: int
    ) -> UpsertResult:
        """Create, update (version + 1, re-planned to ``first_tick_ms``) or leave unchanged.

        A changed or re-activated schedule takes state ``active`` (``paused`` when the
        definition says ``enabled: false``), ``next_tick_ms = first_tick_ms`` and failures 0.
        An archived schedule whose definition is unchanged is re-activated the same way.
        """

    def archive_missing(self, keep_names: Sequence[str], source: Source, now_ms: int) -> list[str]:
        """Archive every non-archived schedule of ``source`` whose name is not in ``keep_names``."""

    def set_state(
        self,
        name: str,
        state: ScheduleState,
        now_ms: int,
        next_tick_ms: int | None = None,
        next_due_ms: int | None = None,
    ) -> ScheduleRecord:
        """Change state (pause, resume, archive, quarantine); resets failures. Raises
        ScheduleNotFound. ``next_due_ms`` must be None unless the state is ``active``."""

    def delete(self, name: str) -> bool:
        """Remove the schedule row; its history stays."""

    # -- history ------------------------------------------------------------------------------
    def history(self, name: str, limit: int, before_id: int | None = None) -> list[StoredEvent]:
        """Audit events of a schedule, newest first, ids below ``before_id`` when given."""

    def find_enqueued(self, task_id: str) -> StoredEvent | None:
        """The ``enqueued`` record of a task id, if any (manual-run idempotency)."""

    def prune_history(self, names: Sequence[str], keep: int) -> int:
        """Keep the newest ``keep`` events of each named schedule; return how many were removed."""

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


# -- runs (the worker side, SPEC §6) --------------------------------------------------------------


class RunState(str, Enum):
    """What the worker side knows of one tick's run (``run_state`` in history, SPEC §8)."""

    STARTED = "started"
    RETRIED = "retried"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REVOKED = "revoked"
    UNKNOWN = "unknown"


FINAL_RUN_STATES = frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.REVOKED})
"""A run in one of these states is finished: it never blocks overlap and is never run again."""


class WriteIf(str, Enum):
    """When a run-state write replaces the state already stored for that tick."""

    ALWAYS = "always"
    OWNER = "owner"
    """Only if the row is absent or still held by the same owner (the run that writes)."""
    UNFINISHED = "unfinished"
    """Only if the row exists and is not finished (the worker's main process, which does not
    know the owner: hard time limits and lost pool processes)."""


@dataclass(frozen=True)
class RunKey:
    """Which tick a run belongs to: its task id and where it came from."""

    task_id: str
    schedule: str
    tick_ms: int
    trigger: str


@dataclass(frozen=True)
class RunWrite:
    """One run-state write; the row stops counting ``keep_ms`` after the store's now."""

    key: RunKey
    state: RunState
    owner: str
    keep_ms: int
    write_if: WriteIf = WriteIf.OWNER


@dataclass(frozen=True)
class RunRecord:
    """A row of the runs table as read back."""

    task_id: str
    schedule_key: str
    tick_ms: int
    trigger: str
    state: RunState
    owner: str | None
    updated_at_ms: int
    expires_at_ms: int | None


@dataclass(frozen=True)
class PreviousTick:
    """The newest automatic tick of a schedule enqueued before a given one, and its run."""

    task_id: str
    tick_ms: int
    enqueued_at_ms: int
    state: RunState | None
    expires_at_ms: int | None
    now_ms: int


class RunStore(Protocol):
    """Run tracking and the store-backed dedup claim, on the store's ``durable_beat_runs`` table.

    Rules (held by ``tests/integration/test_worker.py``):

    1. **Claim.** ``claim`` writes ``started`` for a tick if it has no row, if its row expired
       (``expires_at_ms`` before the store's now: a lost run, or a finished one past the dedup
       window), or if the row is ``retried`` and the delivery is a retry (``retries > 0``). It
       is atomic: of concurrent claims of one task id exactly one succeeds. Otherwise nothing
       changes and the stored state is returned.
    2. **Writes** follow ``WriteIf`` and set ``expires_at_ms`` to the store's now + ``keep_ms``.
    3. **Heartbeat** pushes ``expires_at_ms`` of ``started`` rows still held by their owner.
    4. **Time** is the store's clock, as for the round.
    """

    def claim(self, key: RunKey, owner: str, retries: int, ttl_ms: int) -> RunState | None:
        """None if this delivery now holds the tick; else the state that refused it."""

    def write(self, writes: Sequence[RunWrite]) -> None:
        """Apply run-state writes (rule 2), in order, in one transaction."""

    def heartbeat(self, held: Sequence[tuple[str, str]], ttl_ms: int) -> None:
        """Refresh the expiry of each (task id, owner) still ``started`` (rule 3)."""

    def mark_revoked(self, key: RunKey, owner: str, keep_ms: int) -> bool:
        """Record ``revoked`` for a tick that has not started (no row, or ``retried``, or
        expired): a delivery of it is then refused. True if recorded."""

    def get_run(self, task_id: str) -> RunRecord | None:
        """The run row of a task id."""

    def previous_tick(self, schedule: str, before_tick_ms: int) -> PreviousTick | None:
        """The newest ``enqueued`` automatic tick of ``schedule`` before ``before_tick_ms``."""

    def prune_runs(self, limit: int) -> int:
        """Delete up to ``limit`` expired rows whose ``enqueued`` record is gone."""

    def close(self) -> None:
        """Release connections; idempotent."""
