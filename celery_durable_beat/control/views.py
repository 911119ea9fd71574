"""The values the control API returns, each serialising to exactly SPEC §8's JSON fields.

Frozen dataclasses rather than dicts so the CLI, the HTTP API and Python callers share one shape
with types; ``to_json()`` is the only place field names are spelled for the wire. Instants are
rendered for people here: tick instants in the schedule's own zone with its offset, record times
in UTC.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any

from celery_durable_beat.control.shown import INVALID, FieldProblem, Shown
from celery_durable_beat.exceptions import InvalidArgument
from celery_durable_beat.ids import format_tick_instant
from celery_durable_beat.model import (
    EXPIRES_NEXT_TICK,
    Definition,
    OperatorAction,
    ScheduleState,
)
from celery_durable_beat.schedules.bounds import name_problem
from celery_durable_beat.schedules.spec import spec_to_json
from celery_durable_beat.store.base import ScheduleRecord, StoredAction, StoredEvent

_CURSOR_PREFIX = "h1."
ACTIONS_CURSOR = "a1."
"""The prefix of an ``actions`` cursor: a history cursor is refused there, and the other way."""
_LAST_EVENT_ID = 2**63 - 1
"""The largest id an audit record can have (a BIGINT column)."""


class UpsertStatus(str, Enum):
    """What ``upsert`` did; compares equal to the plain words of SPEC §8."""

    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"


@dataclass(frozen=True)
class NextTick:
    """One upcoming tick: its instant in the schedule's zone and the task id it will carry."""

    tick_ms: int
    tick: str
    task_id: str

    def to_json(self) -> dict[str, Any]:
        return {"tick_ms": self.tick_ms, "tick": self.tick, "task_id": self.task_id}


@dataclass(frozen=True)
class ScheduleView:
    """A schedule as ``list`` shows it; ``definition`` is for Python callers, not serialised."""

    name: str
    task: str
    schedule: str
    tz: str
    missed: str
    backfill_max: int | None
    """None only when the stored definition cannot be read (``invalid`` names it)."""
    overlap: str
    jitter: float | None
    """None only when the stored value cannot be shown (``invalid`` names it)."""
    state: str
    version: int
    source: str
    next_tick: str | None
    next_tick_ms: int | None
    last_tick_ms: int | None
    last_outcome: str | None
    start_at: str | None
    end_at: str | None
    expires: float | str | None
    pause_on_failure: int | None
    require_worker: bool | None
    state_reason: str | None
    """Why a paused schedule is paused: ``operator``, ``disabled`` or ``failures``."""
    buffered_tick: str | None
    """``buffer_one``: the tick waiting for the previous run to end (in the schedule's zone)."""
    kind: str
    """``cron``, ``interval`` or ``at`` (one tick, SPEC §15); ``invalid`` when unreadable."""
    exclude: list[Any] | None
    """The excluded dates as written (``"2026-12-25"``, ``{"from": ..., "to": ...}``), read in
    the schedule's zone (an interval's: the app's zone); None when there are none. What a PUT
    of the same entry takes back (SPEC §15)."""
    invalid: tuple[FieldProblem, ...]
    """The stored values that cannot be shown (``control/shown.py``); each field named here
    holds a stand-in. Serialised as ``invalid`` only when not empty."""
    definition: Definition = field(repr=False, compare=False)
    """The stored definition; a stand-in never to plan from when ``invalid`` names
    ``definition`` (the stored one cannot be read)."""

    def to_json(self) -> dict[str, Any]:
        return _with_invalid({name: getattr(self, name) for name in LIST_FIELDS}, self.invalid)


LIST_FIELDS = tuple(f.name for f in fields(ScheduleView) if f.name not in ("definition", "invalid"))


def _with_invalid(body: dict[str, Any], invalid: tuple[FieldProblem, ...]) -> dict[str, Any]:
    """``body`` plus ``invalid`` when some stored value could not be shown."""
    if invalid:
        body["invalid"] = [problem.to_json() for problem in invalid]
    return body


@dataclass(frozen=True)
class SchedulePage:
    """One page of ``list``: its schedules, how many match the filter, how many exist."""

    schedules: tuple[ScheduleView, ...]
    matched: int
    total: int


"""The fields of a ``list`` item, in SPEC §8's order."""


@dataclass(frozen=True)
class Overdue:
    """A schedule whose stored next tick is already past (no beat ran): since when, how many
    occurrences are due, and which of them its missed-run policy fires on the next round
    (SPEC §8). ``fires`` is empty when ``max_lateness`` drops them all."""

    since: str
    missed: int
    fires: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"since": self.since, "missed": self.missed, "fires": list(self.fires)}


@dataclass(frozen=True)
class PausedBy:
    """The operator's pause that holds a schedule: who, when (ISO 8601 UTC) and why."""

    actor: str
    at: str
    reason: str | None

    def to_json(self) -> dict[str, Any]:
        return {"actor": self.actor, "at": self.at, "reason": self.reason}


@dataclass(frozen=True)
class ScheduleDetail(ScheduleView):
    """A schedule as ``show`` gives it, flat: its attributes are the ``show --json`` fields.

    The ``list`` fields, then ``description`` (the schedule in words), ``about`` (the entry's own
    free text), ``overdue``, ``next`` (future tick instants only, in the schedule's zone) and
    ``args``, ``kwargs``, ``options`` with ``durable_beat_redact`` applied. ``definition`` (from
    ``ScheduleView``) is the validated definition for Python callers (unredacted) and is never
    serialised.
    """

    description: str
    about: str | None
    overdue: Overdue | None
    next: tuple[str, ...]
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    options: Mapping[str, Any]
    paused_by: PausedBy | None = None
    """Who paused it, when and why (SPEC §15); None unless an operator's pause holds it."""

    def to_json(self) -> dict[str, Any]:
        body = {
            **{name: getattr(self, name) for name in LIST_FIELDS},
            "description": self.description,
            "about": self.about,
            "overdue": None if self.overdue is None else self.overdue.to_json(),
            "next": list(self.next),
            "args": list(self.args),
            "kwargs": dict(self.kwargs),
            "options": dict(self.options),
            "paused_by": None if self.paused_by is None else self.paused_by.to_json(),
        }
        return _with_invalid(body, self.invalid)


DETAIL_FIELDS = (
    *LIST_FIELDS,
    "description",
    "about",
    "overdue",
    "next",
    "args",
    "kwargs",
    "options",
    "paused_by",
)
"""The fields of ``show --json`` and the attributes of ``DurableBeat.get``, in SPEC §8's order."""


@dataclass(frozen=True)
class EventView:
    """One audit record; ``id`` orders events and feeds the cursor but is not serialised."""

    id: int
    schedule: str
    tick_ms: int
    task_id: str | None
    trigger: str
    outcome: str
    reason: str | None
    lag_ms: int | None
    version: int
    recorded_at: str
    run_state: str | None

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in EVENT_FIELDS}


EVENT_FIELDS = (
    "schedule",
    "tick_ms",
    "task_id",
    "trigger",
    "outcome",
    "reason",
    "lag_ms",
    "version",
    "recorded_at",
    "run_state",
)


@dataclass(frozen=True)
class HistoryPage:
    """Events newest first; ``next_cursor`` fetches the older ones (None on the last page)."""

    events: tuple[EventView, ...]
    next_cursor: str | None

    def to_json(self) -> dict[str, Any]:
        return {"events": [e.to_json() for e in self.events], "next_cursor": self.next_cursor}


@dataclass(frozen=True)
class ActionView:
    """One operator action (SPEC §15); ``id`` feeds the cursor and is not serialised."""

    id: int
    at: str
    actor: str
    action: str
    schedule: str
    reason: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "actor": self.actor,
            "action": self.action,
            "schedule": self.schedule,
            "reason": self.reason,
        }


def action_view(row: StoredAction) -> ActionView:
    return ActionView(
        id=row.id,
        at=format_tick_instant(row.at_ms),
        actor=row.actor,
        action=row.action.value,
        schedule=row.schedule,
        reason=row.reason,
    )


def paused_by(newest_first: Sequence[StoredAction]) -> PausedBy | None:
    """The operator's pause holding a paused schedule: its newest pause, unless a resume came
    after it (then beat paused it itself: failures or ``enabled: false``, which
    ``state_reason`` names)."""
    for row in newest_first:
        if row.action is OperatorAction.RESUME:
            return None
        if row.action is OperatorAction.PAUSE:
            return PausedBy(row.actor, format_tick_instant(row.at_ms), row.reason)
    return None


@dataclass(frozen=True)
class ActionsPage:
    """Actions newest first; ``next_cursor`` fetches older ones (None on the last page)."""

    actions: tuple[ActionView, ...]
    next_cursor: str | None

    def to_json(self) -> dict[str, Any]:
        return {"actions": [a.to_json() for a in self.actions], "next_cursor": self.next_cursor}


@dataclass(frozen=True)
class BackfillTick:
    """One occurrence a backfill publishes (or, dry, would): instant, ms and task id."""

    tick: str
    tick_ms: int
    task_id: str

    def to_json(self) -> dict[str, Any]:
        return {"tick": self.tick, "tick_ms": self.tick_ms, "task_id": self.task_id}


@dataclass(frozen=True)
class BackfillResult:
    """A backfill (SPEC §15): the window's occurrences, how many were enqueued already, and
    the ones published (``dry_run``: the ones that would be), oldest first."""

    schedule: str
    dry_run: bool
    occurrences: int
    already_enqueued: int
    ticks: tuple[BackfillTick, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "schedule": self.schedule,
            "dry_run": self.dry_run,
            "occurrences": self.occurrences,
            "already_enqueued": self.already_enqueued,
            "ticks": [t.to_json() for t in self.ticks],
        }


@dataclass(frozen=True)
class TriggerResult:
    """A manual run: its task id, and whether this call created it (False: the key was seen)."""

    task_id: str
    created: bool

    def to_json(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "created": self.created}


@dataclass(frozen=True)
class WorkerView:
    """A live worker that ran ``install(app)``: its node name, the queues it consumes and when
    it last announced itself (ISO 8601 UTC, on the store's clock)."""

    hostname: str
    queues: tuple[str, ...]
    last_seen: str
    last_seen_ms: int = field(compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"hostname": self.hostname, "queues": list(self.queues), "last_seen": self.last_seen}


@dataclass(frozen=True)
class StatusView:
    """Leadership, load and live workers of the app's namespace (``namespace``, None: the
    default). ``leader`` is None when nobody holds an unexpired lease; ``workers`` are those
    seen within ``durable_beat_worker_ttl``, by hostname."""

    leader: str | None
    epoch: int
    lease_expires_at: str | None
    counts: Mapping[str, int]
    due_backlog: int
    now_ms: int = field(compare=False)
    lease_expires_at_ms: int | None = field(compare=False)
    workers: tuple[WorkerView, ...] = ()
    namespace: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "leader": self.leader,
            "epoch": self.epoch,
            "lease_expires_at": self.lease_expires_at,
            "counts": dict(self.counts),
            "due_backlog": self.due_backlog,
            "workers": [worker.to_json() for worker in self.workers],
        }


def schedule_view(record: ScheduleRecord) -> ScheduleView:
    """The list item of a stored schedule; only an active schedule has a next tick.

    Every stored value goes through ``Shown``: one that cannot be shown is named in
    ``invalid`` and replaced by a stand-in, so one bad row never fails a read.
    """
    d = record.definition
    readable = record.unreadable is None
    exclude_tz = d.exclude.tz if readable and d.exclude is not None else None
    shown = Shown(d.tz if readable else "UTC", d.spec if readable else None, exclude_tz)
    if not readable:
        shown.add("definition", record.unreadable or "")
    name_error = name_problem(record.name)
    if name_error is not None:
        shown.add("name", name_error)
    next_ms = record.next_tick_ms if record.state is ScheduleState.ACTIVE else None
    next_tick = shown.instant("next_tick", next_ms)
    last_tick = shown.instant("last_tick_ms", record.last_tick_ms)
    return ScheduleView(
        name=record.name,
        task=shown.text("task", d.task) if readable else INVALID,
        schedule=_spec_text(d) if readable else INVALID,
        tz=shown.zone,  # the zone the instants are shown in: UTC when the stored one is not one
        missed=d.missed.value if readable else INVALID,
        backfill_max=d.backfill_max if readable else None,
        overlap=d.overlap.value if readable else INVALID,
        jitter=shown.seconds("jitter", d.jitter) if readable else None,
        state=record.state.value,
        version=record.version,
        source=record.source.value,
        next_tick=next_tick,
        next_tick_ms=None if next_tick is None else next_ms,
        last_tick_ms=None if last_tick is None else record.last_tick_ms,
        last_outcome=None if record.last_outcome is None else record.last_outcome.value,
        start_at=shown.instant("start_at", d.start_at_ms),
        end_at=shown.instant("end_at", d.end_at_ms),
        expires=_expires(shown, d.expires),
        pause_on_failure=d.pause_on_failure,
        require_worker=d.require_worker or None,
        state_reason=None if record.state_reason is None else record.state_reason.value,
        buffered_tick=shown.instant("buffered_tick", record.buffered_tick_ms),
        kind=_kind(d) if readable else INVALID,
        exclude=None if d.exclude is None or not readable else d.exclude.to_json(),
        invalid=tuple(shown.problems),
        definition=d,
    )


def _kind(d: Definition) -> str:
    """The kind of schedule, as the stored JSON names it: ``cron``, ``interval``, ``at``,
    ``solar``, ``rrule`` or ``custom``."""
    return str(spec_to_json(d.spec)["kind"])


def _spec_text(d: Definition) -> str:
    """The schedule as written (``spec.text()``), or ``INVALID`` when its fields are not text."""
    try:
        return d.spec.text()
    except (TypeError, ValueError, OverflowError, LookupError, OSError):
        # a cron field stored as a number, an @at instant past year 9999 or in a zone that is
        # not one: ``Shown`` names the schedule or the zone already
        return INVALID


def _expires(shown: Shown, expires: object) -> float | str | None:
    if expires == EXPIRES_NEXT_TICK:
        return EXPIRES_NEXT_TICK
    seconds: float | None = shown.seconds("expires", expires)
    return seconds


def event_view(event: StoredEvent) -> EventView:
    return EventView(
        id=event.id,
        schedule=event.schedule,
        tick_ms=event.tick_ms,
        task_id=event.task_id,
        trigger=event.trigger.value,
        outcome=event.outcome.value,
        reason=event.reason,
        lag_ms=event.lag_ms,
        version=event.version,
        recorded_at=format_tick_instant(event.recorded_at_ms),
        run_state=event.run_state,
    )


def encode_cursor(event_id: int, prefix: str = _CURSOR_PREFIX) -> str:
    """An opaque page cursor: callers pass it back, never build one."""
    raw = f"{prefix}{event_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, prefix: str = _CURSOR_PREFIX) -> int:
    """The event id of a cursor ``encode_cursor`` gave out; anything else is refused as invalid
    input naming ``cursor`` (never sent to the store: an id past BIGINT would fail there)."""
    source = "history" if prefix == _CURSOR_PREFIX else "actions"
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        if not raw.startswith(prefix):
            raise ValueError(raw)
        event_id = int(raw[len(prefix) :])
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise InvalidArgument(
            f"cursor {cursor!r} is not one {source} gave out; start again without a cursor",
            field="cursor",
        ) from None
    if not 1 <= event_id <= _LAST_EVENT_ID:
        raise InvalidArgument(f"cursor {cursor!r} is out of range", field="cursor")
    return event_id
