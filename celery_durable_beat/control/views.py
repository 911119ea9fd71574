"""The values the control API returns, each serialising to exactly SPEC §8's JSON fields.

Frozen dataclasses rather than dicts so the CLI, the HTTP API and Python callers share one shape
with types; ``to_json()`` is the only place field names are spelled for the wire. Instants are
rendered for people here: tick instants in the schedule's own zone with its offset, record times
in UTC.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any

from celery_durable_beat.exceptions import InvalidArgument
from celery_durable_beat.ids import format_tick_instant
from celery_durable_beat.model import Definition, ScheduleState
from celery_durable_beat.schedules.render import tick_isoformat
from celery_durable_beat.store.base import ScheduleRecord, StoredEvent

_CURSOR_PREFIX = "h1."


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
    backfill_max: int
    overlap: str
    jitter: float
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
    definition: Definition = field(repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in LIST_FIELDS}


LIST_FIELDS = tuple(f.name for f in fields(ScheduleView) if f.name != "definition")


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

    def to_json(self) -> dict[str, Any]:
        return {
            **{name: getattr(self, name) for name in LIST_FIELDS},
            "description": self.description,
            "about": self.about,
            "overdue": None if self.overdue is None else self.overdue.to_json(),
            "next": list(self.next),
            "args": list(self.args),
            "kwargs": dict(self.kwargs),
            "options": dict(self.options),
        }


DETAIL_FIELDS = (
    *LIST_FIELDS,
    "description",
    "about",
    "overdue",
    "next",
    "args",
    "kwargs",
    "options",
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
    """Leadership, load and live workers. ``leader`` is None when nobody holds an unexpired
    lease; ``workers`` are those seen within ``durable_beat_worker_ttl``, by hostname."""

    leader: str | None
    epoch: int
    lease_expires_at: str | None
    counts: Mapping[str, int]
    due_backlog: int
    now_ms: int = field(compare=False)
    lease_expires_at_ms: int | None = field(compare=False)
    workers: tuple[WorkerView, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "leader": self.leader,
            "epoch": self.epoch,
            "lease_expires_at": self.lease_expires_at,
            "counts": dict(self.counts),
            "due_backlog": self.due_backlog,
            "workers": [worker.to_json() for worker in self.workers],
        }


def schedule_view(record: ScheduleRecord) -> ScheduleView:
    """The list item of a stored schedule; only an active schedule has a next tick."""
    d = record.definition
    active = record.state is ScheduleState.ACTIVE
    next_ms = record.next_tick_ms if active else None
    return ScheduleView(
        name=record.name,
        task=d.task,
        schedule=d.spec.text(),
        tz=d.tz,
        missed=d.missed.value,
        backfill_max=d.backfill_max,
        overlap=d.overlap.value,
        jitter=d.jitter,
        state=record.state.value,
        version=record.version,
        source=record.source.value,
        next_tick=None if next_ms is None else tick_isoformat(next_ms, d.tz),
        next_tick_ms=next_ms,
        last_tick_ms=record.last_tick_ms,
        last_outcome=None if record.last_outcome is None else record.last_outcome.value,
        start_at=_instant(d.start_at_ms, d.tz),
        end_at=_instant(d.end_at_ms, d.tz),
        expires=d.expires,
        pause_on_failure=d.pause_on_failure,
        require_worker=d.require_worker or None,
        state_reason=None if record.state_reason is None else record.state_reason.value,
        buffered_tick=_instant(record.buffered_tick_ms, d.tz),
        definition=d,
    )


def _instant(ms: int | None, tz: str) -> str | None:
    return None if ms is None else tick_isoformat(ms, tz)


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


def encode_cursor(event_id: int) -> str:
    """An opaque page cursor: callers pass it back, never build one."""
    raw = f"{_CURSOR_PREFIX}{event_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        if not raw.startswith(_CURSOR_PREFIX):
            raise ValueError(raw)
        event_id = int(raw[len(_CURSOR_PREFIX) :])
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise InvalidArgument(
            f"cursor {cursor!r} is not one history gave out; start again without a cursor"
        ) from None
    if event_id < 1:
        raise InvalidArgument(f"cursor {cursor!r} is out of range")
    return event_id
