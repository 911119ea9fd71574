"""The store port, split by who calls it: each Protocol is what one caller needs, with its rules.

- ``RoundStore``: the leader's round and loop (``dispatch.py``, ``beat_loop.py``,
  ``leadership.py``): the clock, what is due, the fenced settle, the epoch, pruning. Rules 1-6, 8.
- ``SyncStore``: config sync (``sync.py``): the digests and the fenced bulk write. Rule 7.
- ``AdminStore``: operator writes (``control/``): upsert, state changes, delete, manual runs.
  Rules 9, 10.
- ``StatusStore``: reads for the CLI, the HTTP API, the console and the metrics.
- ``SchemaStore``: opening and closing a store, in any process.

``BeatStore`` (what the beat loop drives), ``ControlStore`` (what ``DurableBeat`` drives) and
``Store`` (all of them: what the composition roots build and both backends implement) are
unions. The values the methods speak in are in ``store/values.py`` and re-exported here; the
rules are decided once, as pure functions, in ``store/rules.py``. The contract tests
(``tests/integration/test_store_contract.py``, ``test_store_sync_contract.py``) hold every
backend to every numbered rule.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from celery_durable_beat.model import Definition, ScheduleState, Source, StateReason
from celery_durable_beat.store.values import (
    PRUNE_CHUNK,
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
    UpsertOutcome,
    UpsertResult,
)

__all__ = [
    "PRUNE_CHUNK",
    "ActionEntry",
    "Advance",
    "AdminStore",
    "AuditEvent",
    "BeatStore",
    "Claim",
    "ConfigChange",
    "ControlStore",
    "DueSchedule",
    "LeaderInfo",
    "Recheck",
    "RedeliveryCandidate",
    "RoundStore",
    "ScheduleRecord",
    "SchemaStore",
    "Store",
    "StatusStore",
    "StoredAction",
    "StoredDigest",
    "StoredEvent",
    "SyncStore",
    "UpsertOutcome",
    "UpsertResult",
]


class Claim(Protocol):
    """The due rows of one round, already read and committed: a claim holds nothing."""

    schedules: Sequence[DueSchedule]

    def enqueued_task_ids(self, task_ids: Sequence[str]) -> set[str]:
        """Which of these task ids already have an ``enqueued`` record."""


class SchemaStore(Protocol):
    """Opening and closing a store: every process that holds one."""

    url: str
    namespace: str | None
    """The namespace every call reads and writes (rule 7a); None: the default."""

    def ensure_schema(self) -> None:
        """Create the schema on an empty database; raise SchemaOutdated on an old one."""

    def migrate(self) -> str:
        """Create or upgrade the schema to the newest revision; return that revision."""

    def close(self) -> None:
        """Release connections; idempotent."""


class RoundStore(Protocol):
    """What the leader's round and loop need: the rules a tick's path keeps.

    1. **Time.** ``now_ms()`` is the database's clock. The leader judges what is due by it.
    2. **Due rows.** ``claim_due(now_ms, limit)`` yields at most ``limit`` active schedules whose
       ``next_due_ms <= now_ms``, earliest first, from one indexed query. Work follows what is
       due: idle rows are never read. Paused, archived and quarantined rows have
       ``next_due_ms`` NULL. The read commits before the block runs: **nothing is locked or
       held while the round publishes** (SPEC §3), so the CLI, the console and the workers'
       store-backed claims never wait on a round. Two beats may therefore read the same rows.
       Only the lease holder runs rounds; a leader that stalled past its lease and wakes
       mid-round may publish ticks the new leader also publishes — the same deterministic task
       ids, which the worker guard absorbs — but its ``settle`` is refused by the fence (rule 4)
       or, for a row the new leader already moved, by the compare-and-set (rule 5). A tick is
       never lost and never advanced twice.
    3. **Audit before advance.** ``settle(events, advances, epoch)`` writes the round's audit
       events and then its advances in one short transaction: an advance never commits without
       the records of what it moves past. An ``enqueued`` event is unique per task id: a second
       one for the same task id is ignored, never an error, so replaying a tick is safe.
    4. **Fencing.** Every audit write and every advance of the round carries the writer's epoch.
       The store keeps the newest epoch it has seen (``register_epoch``); a write with an older
       one raises ``StaleEpoch`` and changes nothing. The epoch is checked inside the writing
       statement (PostgreSQL) or under the lock that an epoch bump also needs (SQLite's write
       lock, the memory store's lock), never by a read that a bump could overtake before the
       write. (Manual runs are written outside the fence by design: ``AdminStore``, rule 10.)
    5. **Compare-and-set advance.** ``settle`` moves a schedule only if it is still active and
       its ``next_tick_ms`` still equals what the round read; otherwise that item reports
       ``False`` and nothing changes (``rules.advance_applies``).
    6. **History outlives schedules.** Audit events are keyed by schedule name, not by row id.
    8. **Pruning is bounded per statement, not per schedule.** ``prune_history`` removes the
       surplus of many schedules with one statement per ``PRUNE_CHUNK`` names, so its cost
       follows the number of chunks, never one round trip per schedule; what survives is
       ``rules.prunable``'s choice (a record still watched for redelivery, rule 11, always).
    11. **Redelivery is watched through the first record, fenced.** An ``enqueued`` event given
        to ``settle`` with ``recheck_ms`` is watched: ``redelivery_candidates(now_ms, limit)``
        returns at most ``limit`` watched records whose ``recheck_ms <= now_ms``, earliest
        first, from one query on an index that holds the watched records only (so an idle
        check costs one probe whatever the history), each with its schedule as it is now.
        ``settle_redeliveries(events, rechecks, epoch)`` writes the redeliveries' records
        (outcome ``enqueued``, trigger ``redeliver``, the tick's task id again: they are not
        first records, rule 3 leaves them out, ``rules.is_first_enqueued``) and then each
        recheck (``recheck_ms`` None: never watched again) in one transaction, fenced as rule 4
        says: an older epoch raises ``StaleEpoch`` and writes nothing. A record pruned meanwhile
        is simply gone (its recheck changes nothing).
    12. **A burst's settle beside its next claim.** Where ``settles_beside_claims`` is True, a
        round's ``settle`` may run on a thread of its own while the same store serves the next
        round's ``claim_due(..., excluding=...)``, which leaves out the rows being settled
        (they are still due until that settle commits). The two touch disjoint rows; each keeps
        rules 3-5 on its own.
    """

    def now_ms(self) -> int:
        """The database's clock, UTC epoch milliseconds (rule 1)."""

    def earliest_due_ms(self) -> int | None:
        """The smallest ``next_due_ms`` of any active schedule (one index probe)."""

    def clock_and_earliest_due(self) -> tuple[int, int | None]:
        """``now_ms()`` and ``earliest_due_ms()`` together, in one round trip: the idle round."""

    @property
    def settles_beside_claims(self) -> bool:
        """Rule 12: whether ``settle`` may run on another thread while this store claims."""

    def claim_due(
        self, now_ms: int, limit: int, excluding: Collection[int] = ()
    ) -> AbstractContextManager[Claim]:
        """The due rows of one round (rule 2), but the rows whose id is in ``excluding``."""

    def settle(
        self, events: Sequence[AuditEvent], advances: Sequence[Advance], epoch: int
    ) -> list[bool]:
        """A round's audit events, then its advances, in one short transaction (rules 3-5);
        True where an advance applied. Raise StaleEpoch if fenced: then nothing is written."""

    def register_epoch(self, epoch: int) -> None:
        """Raise the newest epoch seen to ``epoch`` (never lowers it; rule 4)."""

    def prune_history(self, names: Sequence[str], keep: int) -> int:
        """Keep the newest ``keep`` events of each named schedule; return how many were removed
        (one statement per ``PRUNE_CHUNK`` names, rule 8)."""

    def redelivery_candidates(self, now_ms: int, limit: int) -> list[RedeliveryCandidate]:
        """The watched ticks whose recheck is due, earliest first (rule 11)."""

    def settle_redeliveries(
        self, events: Sequence[AuditEvent], rechecks: Sequence[Recheck], epoch: int
    ) -> None:
        """Redeliveries' records, then the rechecks, in one fenced transaction (rule 11)."""


class SyncStore(Protocol):
    """What config sync needs.

    7. **Config sync is bulk and fenced.** ``definition_digests(names)`` reads the name,
       source, state and definition hash of the schedules ``names`` name (case-insensitively)
       and of every config schedule not archived, in a few indexed reads: never one row per
       stored schedule, so a store of a million API schedules costs a small config's sync
       nothing; ``sync_config(changes, epoch, now_ms)``
       applies a batch of differences in one transaction with a constant number of statements,
       whatever its size. Its epoch is checked under a lock on the fence that orders it against
       ``register_epoch`` (never by a read before the write): an older epoch raises
       ``StaleEpoch`` and writes nothing. Each change is decided against the row as it is
       inside that transaction, by ``rules.decide_change`` (rule 9's upsert decision, as
       config): an API-owned row is ``ignored``; an unchanged, non-archived one moves nothing;
       a changed one gets version + 1, ``first_tick_ms`` and failures 0; a removed one is
       ``archived``. A re-plan that drops a tick already due (active, ``next_due_ms <=
       now_ms``) records a ``skipped`` event with reason ``replanned`` in the same transaction.
    7a. **One namespace, its own app's config.** A store object serves one namespace (SPEC
       §16): every read and write above and below is of that namespace's rows only, fenced by
       that namespace's own epoch. Each digest names the app whose sync last kept the row
       (``StoredDigest.app``; None before namespaces); sync archives no row another app kept.
    """

    def definition_digests(self, names: Sequence[str]) -> list[StoredDigest]:
        """Name, source, state and definition hash of the schedules named and of every config
        schedule not archived, each once (rule 7)."""

    def sync_config(
        self,
        changes: Sequence[ConfigChange],
        epoch: int,
        now_ms: int,
        app: str | None = None,
    ) -> list[UpsertResult]:
        """Apply one batch of config differences, fenced (rule 7); one result per change.
        ``app`` (the syncing app's ``main`` name) is recorded on each config row the batch
        keeps (created, updated or unchanged), so another app sharing the namespace archives
        none of them (rule 7a)."""

    def leader_info(self) -> LeaderInfo:
        """As ``StatusStore.leader_info``: the epoch a one-off sync outside any election (a
        test, ``FrozenBeat``) writes under."""


class AdminStore(Protocol):
    """What operators change, through the control API (SPEC §8).

    9. **One upsert decision.** ``upsert`` decides by ``rules.decide_upsert`` against the row
       as it is under the write's lock: created (version 1), unchanged (same definition hash,
       not archived: nothing moves), updated (version + 1, or the same version when only an
       archived row comes back; re-planned to ``first_tick_ms``, failures 0; state ``active``,
       or ``paused`` when the definition says ``enabled: false``; an operator's pause survives
       unless the change is to ``enabled`` itself), or conflict (the name belongs to the other
       source: nothing written; ``source`` never changes). Creating an ``@at`` schedule whose
       instant is already past records one ``skipped`` event, reason ``missed``, in the same
       transaction (SPEC §15); config sync's creations do the same.
    10. **Manual runs are outside the fence, by design.** ``record_manual(event)`` writes one
        record with trigger ``manual`` and no epoch check, and refuses any other trigger
        (automatic records go through ``settle``, fenced). Why: a manual run advances no
        schedule (nothing a stale leader could double-advance), its task id comes from the
        idempotency key (``find_enqueued`` and rule 3's uniqueness dedup a repeat), and an
        operator must be able to run a task while no leader is up. The record carries the
        newest epoch at the time of writing, for reading only. ``record_backfill(events)``
        writes a backfill's records (trigger ``backfill``, refusing any other) the same way, in
        one transaction: an ``enqueued`` one whose task id has an ``enqueued`` record already
        (the automatic tick got there first) is dropped by rule 3, never an error.
    12. **Who did what.** ``record_action(entry, keep)`` writes one action row stamped with the
        store's clock and, in the same transaction, removes that schedule's rows older than
        its ``keep`` newest (``rules.prunable_actions``): the log is bounded per schedule and,
        keyed by name like history, outlives the schedule. An actor outside 1..``ACTOR_LENGTH``
        characters or a reason over ``REASON_LENGTH`` is refused (``rules.check_action``).
    """

    def upsert(
        self, definition: Definition, source: Source, first_tick_ms: int | None, now_ms: int
    ) -> UpsertResult:
        """Create, update or leave a schedule as rule 9 decides."""

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
        paused schedule is paused; activating one starts its failure streak at its next tick
        (``rules.state_values``)."""

    def delete(self, name: str) -> bool:
        """Remove the schedule row; its history stays (rule 6)."""

    def record_manual(self, event: AuditEvent) -> None:
        """Write a manual run's record, unfenced (rule 10); InvalidArgument for another trigger."""

    def record_backfill(self, events: Sequence[AuditEvent]) -> None:
        """Write a backfill's records, unfenced, in one transaction (rule 10)."""

    def record_action(self, entry: ActionEntry, keep: int) -> None:
        """Write one action row and prune that schedule's log to ``keep`` rows (rule 12)."""


class StatusStore(Protocol):
    """What the CLI, the HTTP API, the console and the metrics read. Reads only: none of them
    locks a row a round writes (rule 2), and history is read by name, after ``delete`` too."""

    def now_ms(self) -> int:
        """The database's clock, UTC epoch milliseconds (rule 1)."""

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

    def history(self, name: str, limit: int, before_id: int | None = None) -> list[StoredEvent]:
        """Audit events of a schedule, newest first, ids below ``before_id`` when given."""

    def find_enqueued(self, task_id: str) -> StoredEvent | None:
        """The ``enqueued`` record of a task id, if any (manual-run idempotency)."""

    def enqueued_among(self, task_ids: Sequence[str]) -> set[str]:
        """Which of these task ids have an ``enqueued`` record (a backfill's gaps), one read."""

    def history_extent(self, name: str) -> tuple[int, int | None]:
        """How many audit records a schedule keeps, and the oldest tick among them (whether a
        backfill window reaches before what history can still prove)."""

    def actions(
        self, name: str | None, limit: int, before_id: int | None = None
    ) -> list[StoredAction]:
        """Action rows newest first, of one schedule (None: all), ids below ``before_id``."""

    def counts_by_state(self) -> dict[str, int]:
        """How many schedules are in each state."""

    def due_backlog(self, now_ms: int) -> int:
        """How many active schedules are due at ``now_ms``."""

    def leader_info(self) -> LeaderInfo:
        """The fencing epoch and, for the store lease, who holds it until when."""


class BeatStore(SchemaStore, RoundStore, SyncStore, Protocol):
    """What one beat process's loop drives: the schema, its rounds and config sync."""


class ControlStore(SchemaStore, AdminStore, StatusStore, Protocol):
    """What ``DurableBeat`` drives: the schema, operator writes and status reads."""


class Store(SchemaStore, RoundStore, SyncStore, AdminStore, StatusStore, Protocol):
    """The whole port: what the composition roots build and every backend implements."""
