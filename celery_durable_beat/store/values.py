"""The values the store port speaks in (``store/base.py``): rows read, events written, results.

Frozen dataclasses and one enum, no behaviour: the rules that compute them are in
``store/rules.py``, the methods that move them in the Protocols of ``store/base.py``, which
re-exports the names callers outside the store use; the backends and rules import the rest
(``StoredRow``, ``UpsertDecision``, ``NAME_LENGTH``) from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from celery_durable_beat.model import (
    Definition,
    OperatorAction,
    Outcome,
    ScheduleState,
    Source,
    StateReason,
    Trigger,
)

NAME_LENGTH = 200
"""Longest schedule name (and lower-cased name) the store accepts (the columns' width)."""

ACTOR_LENGTH = 255
"""Longest actor name an action row holds (a token's name, ``cli:<user>@<host>``)."""
REASON_LENGTH = 500
"""Longest reason an operator may give (SPEC §15: reasons are user text, bounded)."""

PRUNE_CHUNK = 500
"""Schedules whose surplus history one pruning statement removes (rule 8)."""


class UpsertOutcome(str, Enum):
    """What a write decision did to one schedule (``rules.decide_upsert``, ``decide_change``).

    The first three are the public ``control.views.UpsertStatus`` words (SPEC §8).
    """

    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    CONFLICT = "conflict"
    """The name belongs to the other source (config or API): nothing written."""
    IGNORED = "ignored"
    """Config sync's word for a conflict: an API schedule config never touches (SPEC §3)."""
    ARCHIVED = "archived"
    """Config sync only: a config schedule that left the config."""


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
    namespace: str | None = None
    """The namespace the store read it in (None: the default), for its ticks' ids (SPEC §16)."""


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
    unreadable: str | None = None
    """Why the stored definition cannot be read (hand-edited or written by another version),
    else None. Then ``definition`` is a stand-in (``rules.UNREADABLE_TASK``, never enabled) that
    must not be planned or published: the control API shows the row as invalid and refuses to
    resume or trigger it, so one such row never breaks a read of the others."""


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
    recheck_ms: int | None = None
    """Redelivery on (SPEC §6): when the leader first looks whether this ``enqueued`` tick was
    claimed (its record plus ``durable_beat_redeliver_after``); None: never watched."""


@dataclass(frozen=True)
class RedeliveryCandidate:
    """A watched tick whose recheck is due (``RoundStore.redelivery_candidates``): its first
    ``enqueued`` record, and its schedule as it is now (``definition`` None: deleted)."""

    record_id: int
    schedule: str
    tick_ms: int
    task_id: str
    version: int
    """The schedule's version when the tick was published."""
    recorded_at_ms: int
    sent_ms: int
    """When it was last published: its record, then its last redelivery."""
    redeliveries: int
    recheck_ms: int
    definition: Definition | None
    schedule_version: int | None
    """The schedule's version now (None: deleted); another version means another message."""


@dataclass(frozen=True)
class Recheck:
    """What the leader decided for one watched tick: look again at ``recheck_ms`` (None: never
    again), with ``sent_ms`` and ``redeliveries`` as they are now."""

    record_id: int
    recheck_ms: int | None
    sent_ms: int
    redeliveries: int


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
class ActionEntry:
    """One operator action to record (SPEC §15); the store stamps ``at`` with its clock."""

    actor: str
    action: OperatorAction
    schedule: str
    reason: str | None = None


@dataclass(frozen=True)
class StoredAction:
    """An action row as read back: ``id`` orders rows and feeds the cursor."""

    id: int
    at_ms: int
    actor: str
    action: OperatorAction
    schedule: str
    reason: str | None


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
    """What an upsert or one config change did (``UpsertOutcome``), at which version."""

    name: str
    status: UpsertOutcome
    version: int


@dataclass(frozen=True)
class StoredDigest:
    """What config sync reads of every stored schedule to find the differences (rule 7)."""

    name: str
    source: Source
    state: ScheduleState
    definition_hash: str
    app: str | None = None
    """The ``main`` name of the app whose config sync last wrote a config row (None: an API row,
    or one synced before namespaces); sync archives no other app's rows (SPEC §16)."""


@dataclass(frozen=True)
class ConfigChange:
    """One difference config sync writes: a definition to create or update, or (``definition``
    None) a config schedule to archive because it left the config."""

    name: str
    definition: Definition | None = None
    first_tick_ms: int | None = None


@dataclass(frozen=True)
class StoredRow:
    """A schedule row as a write decision finds it (``rules.decide_upsert``): inside
    ``sync_config``'s transaction, under ``upsert``'s row lock, or read for a dry run."""

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
class UpsertDecision:
    """What an upsert or a config change does to one row: ``values`` the columns to write
    (None: nothing; ``rules.state_values`` and ``archive_values`` give stored strings,
    ``plan_values`` members — both backends store either); ``dropped`` the ``replanned``
    record of a due tick the re-plan drops (config sync writes it), or on a creation the
    ``missed`` record of an ``@at`` already past (every upsert path writes it)."""

    name: str
    status: UpsertOutcome
    version: int
    values: dict[str, Any] | None = None
    dropped: AuditEvent | None = None


@dataclass(frozen=True)
class LeaderInfo:
    """The store's view of leadership: the store lease row, or the epoch a Redis lease set."""

    holder: str | None
    epoch: int
    expires_at_ms: int | None
