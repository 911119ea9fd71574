"""The store's business rules, each written once, as pure functions every backend calls.

``store/base.py`` states the rules (numbered, per Protocol); this module decides them, so the
SQL store (``store/sql/``) and the memory store (``store/memory.py``) keep only storage: how a
row is found and written, never what to write. The control API's dry run asks the same
function the upsert does (``decide_upsert``), so "what would happen" cannot drift from what
happens.

Where a rule is a query (rule 8's pruning is one SQL statement per chunk), the function here is
its reference statement in Python, used by the memory store and held to the SQL query by the
contract tests.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from celery_durable_beat.exceptions import InvalidArgument, StaleEpoch
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
from celery_durable_beat.policy import due_ms, unfired_at
from celery_durable_beat.store.values import (
    ACTOR_LENGTH,
    NAME_LENGTH,
    REASON_LENGTH,
    ActionEntry,
    Advance,
    AuditEvent,
    ConfigChange,
    ScheduleRecord,
    StoredEvent,
    StoredRow,
    UpsertDecision,
    UpsertOutcome,
)

NO_TICK = 2**62
"""Above every tick: a schedule without a next tick protects none of its records (rule 8)."""


def iter_chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    """Slices of at most ``size`` items, for batched writes."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def stored_value(member: Any) -> Any:
    """An enum member as its value, as the columns hold it (``str()`` of a str-mixin enum is
    its qualified name, never what the SQL store writes)."""
    return getattr(member, "value", member)


def column_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """Decision values as column values."""
    return {name: stored_value(value) for name, value in values.items()}


def storable_key(name: str) -> str:
    """The key of a name about to be stored; the columns hold at most NAME_LENGTH characters."""
    key = name_key(name)
    if not name or len(name) > NAME_LENGTH or len(key) > NAME_LENGTH:
        raise InvalidArgument(f"schedule name {name!r} must have 1 to {NAME_LENGTH} characters")
    return key


def check_at_least(what: str, value: int, least: int) -> None:
    """Refuse a limit below its floor alike on every backend (``claim_due``, ``history``,
    ``prune_history``)."""
    if value < least:
        raise InvalidArgument(f"{what} must be at least {least}; got {value}")


def refuse_stale(epoch: int, newest: int, writer: str = "a write") -> None:
    """Rule 4: raise StaleEpoch when ``epoch`` is older than the newest the store has seen."""
    if epoch < newest:
        raise StaleEpoch(
            f"{writer} carried fencing epoch {epoch}, older than {newest}, the newest this "
            "store has seen: another beat leads now"
        )


def is_first_enqueued(event: AuditEvent) -> bool:
    """Rule 3's unique record of a tick: ``enqueued`` and not a redelivery's (rule 11), whose
    record repeats the tick's task id."""
    return (
        stored_value(event.outcome) == Outcome.ENQUEUED.value
        and stored_value(event.trigger) != Trigger.REDELIVER.value
        and event.task_id is not None
    )


def check_manual(event: AuditEvent, writer: str = "record_manual") -> None:
    """Rule 10: only an operator's records are written outside the fence: manual runs through
    ``record_manual``, backfills through ``record_backfill``."""
    wanted, what = (
        (Trigger.MANUAL, "manual runs")
        if writer == "record_manual"
        else (Trigger.BACKFILL, "backfills")
    )
    if stored_value(event.trigger) != wanted.value:
        raise InvalidArgument(
            f"{writer} writes {what} only; schedule {event.schedule!r} got trigger "
            f"{stored_value(event.trigger)!r}: automatic records go through settle, fenced"
        )


def check_backfill(events: Sequence[AuditEvent]) -> None:
    """Rule 10 for ``record_backfill``: backfill records only."""
    for event in events:
        check_manual(event, "record_backfill")


def check_action(entry: ActionEntry) -> None:
    """Rule 12: an action row's text fits its columns; refused alike on every backend."""
    storable_key(entry.schedule)
    if not entry.actor or len(entry.actor) > ACTOR_LENGTH:
        raise InvalidArgument(f"an actor must have 1 to {ACTOR_LENGTH} characters")
    if entry.reason is not None and len(entry.reason) > REASON_LENGTH:
        raise InvalidArgument(
            f"reason has {len(entry.reason)} characters; give at most {REASON_LENGTH}",
            field="reason",
        )


def prunable_actions(ids: Sequence[int], keep: int) -> set[int]:
    """Rule 12's pruning for one schedule: the action rows older than its ``keep`` newest
    (``store/sql/actions._prune``'s reference)."""
    return set(sorted(ids, reverse=True)[max(keep, 0) :])


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


def advance_applies(item: Advance, state: ScheduleState, next_tick_ms: int | None) -> bool:
    """Rule 5's compare-and-set for one row: still active and still at the tick the round read
    (None equals None: a ``buffer_one`` tick may outlive the schedule's ``end_at``)."""
    return state is ScheduleState.ACTIVE and next_tick_ms == item.expected_next_tick_ms


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


def archive_values() -> dict[str, Any]:
    """What archiving a schedule writes (config sync's and ``set_state``'s alike), failures 0."""
    return {**state_values(ScheduleState.ARCHIVED, None, None, None), "failures": 0}


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


def stored_row(record: ScheduleRecord) -> StoredRow:
    """A schedule record as ``decide_upsert`` reads it (the control API's dry run)."""
    return StoredRow(
        id=record.id,
        name=record.name,
        source=record.source,
        state=record.state,
        definition_hash=record.definition_hash,
        version=record.version,
        next_tick_ms=record.next_tick_ms,
        next_due_ms=record.next_due_ms,
        enabled=record.definition.enabled,
        state_reason=record.state_reason,
        buffered_tick_ms=record.buffered_tick_ms,
    )


def decide_upsert(
    row: StoredRow | None, definition: Definition, source: Source, first_tick_ms: int | None
) -> UpsertDecision:
    """Rule 9, the one upsert decision (``upsert``, config sync, the control API's dry run).

    - no row: ``created`` at version 1, planned from ``first_tick_ms``;
    - a row of the other source: ``conflict``, nothing written (config never touches an API
      schedule, SPEC §3; the API refuses a config one, SPEC §8); ``source`` never changes;
    - the same definition hash on a row that is not archived: ``unchanged``;
    - otherwise ``updated``: version + 1 (kept when only the archived state changes: the
      definition did not), re-planned as ``plan_values`` says; a schedule paused by an operator
      stays paused unless the change is to ``enabled`` itself (config's own way to pause).
    """
    values = plan_values(definition, first_tick_ms)
    if row is None:
        missed = _missed_at(definition, first_tick_ms)
        return UpsertDecision(definition.name, UpsertOutcome.CREATED, 1, values, missed)
    if row.source is not source:
        return UpsertDecision(row.name, UpsertOutcome.CONFLICT, row.version)
    same = row.definition_hash == definition.definition_hash()
    if same and row.state is not ScheduleState.ARCHIVED:
        return UpsertDecision(row.name, UpsertOutcome.UNCHANGED, row.version)
    if row.state is ScheduleState.PAUSED and row.enabled == definition.enabled:
        values.update(state=ScheduleState.PAUSED, state_reason=row.state_reason, next_due_ms=None)
    version = row.version if same else row.version + 1
    return UpsertDecision(definition.name, UpsertOutcome.UPDATED, version, values)


def _missed_at(definition: Definition, first_tick_ms: int | None) -> AuditEvent | None:
    """The ``skipped``/``missed`` record of an ``@at`` already past when its schedule is
    created (SPEC §15): it never fires, and says so once."""
    tick = unfired_at(definition, first_tick_ms)
    if tick is None:
        return None
    detail = {"count": 1, "first_ms": tick, "last_ms": tick, "exact": True}
    return _skipped(definition.name, tick, Reason.MISSED, 1, detail)


def check_changes(changes: Sequence[ConfigChange]) -> list[str]:
    """The storable keys of a batch of config changes; refuse a batch naming one schedule twice."""
    keys = [storable_key(change.name) for change in changes]
    if len(set(keys)) != len(keys):
        raise InvalidArgument("a batch of config changes names one schedule twice")
    return keys


def decide_change(row: StoredRow | None, change: ConfigChange, now_ms: int) -> UpsertDecision:
    """Rule 7 for one change: ``decide_upsert`` as config (a conflict is ``ignored``, SPEC §3's
    word), a removed config row ``archived``, and the ``replanned`` record of a due tick that
    an update drops."""
    definition = change.definition
    if definition is None:
        if row is None or row.source is not Source.CONFIG or row.state is ScheduleState.ARCHIVED:
            version = 0 if row is None else row.version
            return UpsertDecision(change.name, UpsertOutcome.UNCHANGED, version)
        return UpsertDecision(row.name, UpsertOutcome.ARCHIVED, row.version, archive_values())
    decision = decide_upsert(row, definition, Source.CONFIG, change.first_tick_ms)
    if decision.status is UpsertOutcome.CONFLICT:
        return replace(decision, status=UpsertOutcome.IGNORED)
    if decision.status is UpsertOutcome.UPDATED and row is not None:
        return replace(decision, dropped=_dropped(row, now_ms))
    return decision


def _dropped(row: StoredRow, now_ms: int) -> AuditEvent | None:
    """The ``replanned`` record of a due tick that a re-plan replaces (SPEC §3): the tick
    ``buffer_one`` held, else the next tick when it is already due."""
    tick = row.buffered_tick_ms
    if tick is None and row.state is ScheduleState.ACTIVE and row.next_tick_ms is not None:
        due = row.next_due_ms is not None and row.next_due_ms <= now_ms
        tick = row.next_tick_ms if due else None
    if tick is None:
        return None
    return _skipped(row.name, tick, Reason.REPLANNED, row.version, {"count": 1})


def _skipped(
    name: str, tick_ms: int, reason: Reason, version: int, detail: dict[str, Any]
) -> AuditEvent:
    """One automatic tick recorded ``skipped`` outside any round (sync, upsert)."""
    return AuditEvent(
        schedule=name,
        tick_ms=tick_ms,
        task_id=None,
        trigger=Trigger.AUTO,
        outcome=Outcome.SKIPPED,
        reason=reason.value,
        version=version,
        detail=detail,
    )


def prunable(
    events: Sequence[StoredEvent],
    keep: int,
    next_tick_ms: int | None,
    watched: Collection[int] = frozenset(),
) -> set[int]:
    """Rule 8's choice for one schedule, the reference of ``store/sql/admin._prunable``'s query:
    the events older than the ``keep`` newest, except the newest automatic ``enqueued`` one (the
    overlap gate finds the previous run through it), any at or after the schedule's next tick
    (the dedup proof of a tick whose advance has not landed yet) and any the redelivery sweep
    still watches (``watched``, ids with a recheck: rule 11; pruned, a lost tick would never be
    sent again)."""
    newest_enqueued = max(
        (e.id for e in events if e.outcome is Outcome.ENQUEUED and e.trigger is Trigger.AUTO),
        default=-1,
    )
    ids = sorted((e.id for e in events), reverse=True)
    threshold = ids[keep - 1] if 0 < keep <= len(ids) else None
    if keep > 0 and threshold is None:
        return set()
    limit = NO_TICK if next_tick_ms is None else next_tick_ms
    return {
        e.id
        for e in events
        if e.id != newest_enqueued
        and e.id not in watched
        and e.tick_ms < limit
        and (threshold is None or e.id < threshold)
    }
