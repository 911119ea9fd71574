"""What every importer shares: the entries a peer yields, the import run, its report (SPEC §12).

A reader (one module per peer) turns the peer's storage into :class:`PeerEntry` values, each
either a ``beat_schedule``-style entry or the reason it cannot be carried. :func:`run_import`
hands every entry to :meth:`DurableBeat.upsert` (source ``api``, validated exactly as config,
first tick planned from now), so importers know no store, and a second run answers
``unchanged`` for every entry and moves nothing. One entry's failure (unreadable, refused by
the validator, a name config already owns) is that entry's line, never the end of the import.

django-celery-beat and sqlalchemy-celery-beat share one model (the latter mirrors the former),
so the row -> entry mapping of a periodic task lives here once: :func:`periodic_task_entry`.

One-shot tasks become ``@at`` schedules (SPEC §15): a ``ClockedSchedule`` its
``clocked_time``; a ``one_off`` interval or crontab task its next occurrence after the task's
own anchor (``start_time`` when later, else ``date_changed``: when the task was last saved), as
this package computes occurrences (intervals aligned to the epoch, crontabs in their zone).
The anchor is the peer's data, not the clock, so importing twice gives the same instant
(``unchanged``). A one-shot task that already ran (the peer counted a run) is refused: nothing
is left to run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from typing import Any

from celery.schedules import crontab

from celery_durable_beat.celery_config import app_defaults, translate_entry
from celery_durable_beat.clock import datetime_to_ms
from celery_durable_beat.control import DurableBeat
from celery_durable_beat.exceptions import ConfigError, ScheduleConflict
from celery_durable_beat.ids import name_key
from celery_durable_beat.model import OperatorAction
from celery_durable_beat.policy import first_tick
from celery_durable_beat.schedules.spec import AtSpec
from celery_durable_beat.schedules.validate import validate_entry

STATUSES = ("created", "updated", "unchanged", "refused")
"""The word that starts each entry's outcome, in the order the total counts them."""


class Unreadable(Exception):
    """One peer entry could not be decoded; its line says why and the import goes on."""


@dataclass(frozen=True)
class PeerEntry:
    """One schedule as the peer stores it: an entry to upsert, or the reason it is refused."""

    name: str
    entry: dict[str, Any] | None = None
    refused: str | None = None
    one_off_after: datetime | None = None
    """A ``one_off`` interval or crontab task: its entry becomes the first occurrence after
    this instant, as ``@at`` (decided at upsert time, in the app's zone)."""

    @classmethod
    def refuse(cls, name: str, reason: str) -> PeerEntry:
        return cls(name=name, refused=reason)


@dataclass(frozen=True)
class ImportLine:
    """The outcome of one entry: ``created``/``updated``/``unchanged`` or ``refused`` + reason."""

    name: str
    status: str
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "reason": self.reason}

    def text(self) -> str:
        """``nightly: created``; ``report: refused: one-shot task already ran: ...``."""
        tail = self.status if self.reason is None else f"{self.status}: {self.reason}"
        return f"{self.name}: {tail}"


@dataclass(frozen=True)
class ImportReport:
    """Every entry's line, in the peer's order, and the totals."""

    kind: str
    source: str
    dry_run: bool
    lines: tuple[ImportLine, ...] = field(default_factory=tuple)

    def totals(self) -> dict[str, int]:
        return {status: sum(1 for x in self.lines if x.status == status) for status in STATUSES}

    def to_json(self) -> dict[str, Any]:
        return {
            "from": self.kind,
            "source": self.source,
            "dry_run": self.dry_run,
            "entries": [x.to_json() for x in self.lines],
            "totals": self.totals(),
        }

    def text(self) -> list[str]:
        counts = ", ".join(f"{n} {status}" for status, n in self.totals().items())
        total = f"{len(self.lines)} entries from {self.kind} at {self.source}: {counts}"
        if self.dry_run:
            total = f"dry run, nothing written: {total}"
        return [x.text() for x in self.lines] + [total]


def run_import(
    beat: DurableBeat,
    kind: str,
    source: str,
    entries: Iterable[PeerEntry],
    *,
    dry_run: bool,
    reason: str | None = None,
) -> ImportReport:
    """Upsert every carried entry through ``beat``; refuse the rest, each with its reason.
    Each schedule created or changed records an ``import`` action with ``reason``."""
    seen: dict[str, str] = {}
    lines = []
    for peer in entries:
        key = name_key(peer.name)
        if key in seen:  # names compare case-insensitively here, not in every peer
            lines.append(
                ImportLine(peer.name, "refused", f'same name as "{seen[key]}" (names ignore case)')
            )
            continue
        seen[key] = peer.name
        lines.append(_one(beat, peer, dry_run=dry_run, reason=reason))
    return ImportReport(kind=kind, source=source, dry_run=dry_run, lines=tuple(lines))


def _one(beat: DurableBeat, peer: PeerEntry, *, dry_run: bool, reason: str | None) -> ImportLine:
    if peer.entry is None:
        return ImportLine(peer.name, "refused", peer.refused or "no entry")
    try:
        entry = peer.entry if peer.one_off_after is None else _as_at(beat, peer)
        if entry is None:
            return ImportLine(
                peer.name, "refused", "one_off with no occurrence left before its end"
            )
        status = beat.upsert(
            peer.name, entry, dry_run=dry_run, reason=reason, action=OperatorAction.IMPORT
        )
    except ConfigError as exc:
        return ImportLine(peer.name, "refused", "; ".join(p.problem for p in exc.problems))
    except ScheduleConflict as exc:
        return ImportLine(peer.name, "refused", str(exc))
    return ImportLine(peer.name, str(status.value))


def _as_at(beat: DurableBeat, peer: PeerEntry) -> dict[str, Any] | None:
    """A ``one_off`` repeating entry as ``@at`` its first occurrence after the anchor, read
    exactly as the repeating entry would be (its zone, bounds and the app's defaults); None
    when no occurrence is left before its ``end_at``. Raises ConfigError like ``upsert``."""
    assert peer.entry is not None and peer.one_off_after is not None
    repeating = validate_entry(
        peer.name, translate_entry(peer.name, peer.entry), app_defaults(beat.app, beat.settings)
    )
    tick = first_tick(repeating, datetime_to_ms(peer.one_off_after))
    if tick is None:
        return None
    return {**peer.entry, "schedule": AtSpec(tick, repeating.tz).text()}


@dataclass(frozen=True)
class Clocked:
    """A ``ClockedSchedule``: one run at ``at`` (aware)."""

    at: datetime


# -- the django-celery-beat model, shared by sqlalchemy-celery-beat ---------------------------
def periodic_task_entry(
    task: Mapping[str, Any], schedule: Any, tz: str | None, now: datetime
) -> PeerEntry:
    """A ``PeriodicTask`` row (django-celery-beat's columns) and its decoded schedule.

    ``schedule`` is seconds (interval), a ``crontab`` (with ``tz``, its zone), an ``@solar``
    string (:func:`solar_schedule`), a :class:`Clocked` instant, or a :class:`PeerEntry` refusal
    for a kind without a counterpart. Raises Unreadable.
    """
    name = str(task["name"])
    if isinstance(schedule, PeerEntry):
        return schedule
    clocked = isinstance(schedule, Clocked)
    refusal = _one_shot_refusal(task, now, one_shot=clocked or bool(task.get("one_off")))
    if refusal is not None:
        return PeerEntry.refuse(name, refusal)
    entry: dict[str, Any] = {
        "task": task["task"],
        "schedule": schedule.at if isinstance(schedule, Clocked) else schedule,
        "args": _json(task, "args", list, []),
        "kwargs": _json(task, "kwargs", dict, {}),
        "enabled": bool(task.get("enabled", True)),
    }
    if tz is not None:
        entry["tz"] = tz
    options = _options(task)
    if options:
        entry["options"] = options
    if task.get("description"):
        entry["description"] = str(task["description"])
    if task.get("expire_seconds"):
        entry["expires"] = int(task["expire_seconds"])
    entry.update(_bounds(task, now))
    anchor = None if clocked or not task.get("one_off") else _anchor(task, now)
    return PeerEntry(name, entry, one_off_after=anchor)


def _anchor(task: Mapping[str, Any], now: datetime) -> datetime:
    """Where a ``one_off`` task's next occurrence is counted from: its ``start_time`` when
    later than its last save (``date_changed``), else that save; ``now`` when it has neither.
    The peer's data, so a second import finds the same occurrence."""
    start, changed = aware(task.get("start_time")), aware(task.get("date_changed"))
    found = [moment for moment in (start, changed) if moment is not None]
    return max(found) if found else now


def _bounds(task: Mapping[str, Any], now: datetime) -> dict[str, datetime]:
    """``start_time`` → ``start_at`` while it is still to come (one already past bounds
    nothing: no tick before now is planned anyway); ``expires`` → ``end_at``."""
    bounds: dict[str, datetime] = {}
    start = aware(task.get("start_time"))
    if start is not None and start > now:
        bounds["start_at"] = start
    end = aware(task.get("expires"))
    if end is not None:
        bounds["end_at"] = end
    return bounds


def _one_shot_refusal(task: Mapping[str, Any], now: datetime, *, one_shot: bool) -> str | None:
    """A one-shot task that already ran, or an ``expires`` already past, leaves nothing to run."""
    runs = task.get("total_run_count") or 0
    if one_shot and (runs or task.get("last_run_at") is not None):
        last = aware(task.get("last_run_at"))
        when = f" at {last.isoformat()}" if last is not None else ""
        return f"one-shot task already ran{when}: nothing left to run"
    end = aware(task.get("expires"))
    if end is not None and end <= now:
        return f"expired at {end.isoformat()} (expires): nothing left to run"
    return None


def _options(task: Mapping[str, Any]) -> dict[str, Any]:
    """queue, exchange, routing_key, priority, headers: the peer's per-message options, only
    those it sets (``expire_seconds`` becomes the entry's own ``expires``)."""
    options: dict[str, Any] = {
        key: task[key]
        for key in ("queue", "exchange", "routing_key", "priority")
        if task.get(key) not in (None, "")
    }
    headers = _json(task, "headers", dict, {})
    if headers:
        options["headers"] = headers
    return options


def _json(task: Mapping[str, Any], column: str, kind: type, empty: Any) -> Any:
    raw = task.get(column)
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return empty
    try:
        value = json.loads(raw) if isinstance(raw, (str, bytes)) else raw
    except ValueError as exc:
        raise Unreadable(f"{column} is not JSON ({exc})") from None
    if not isinstance(value, kind):
        raise Unreadable(f"{column} is JSON {type(value).__name__}, not {kind.__name__}")
    return value


def interval_seconds(every: Any, period: Any) -> float | int:
    """An ``IntervalSchedule`` (every N days/hours/minutes/seconds/microseconds) in seconds."""
    name = getattr(period, "value", period)  # sqlalchemy-celery-beat reflects an enum
    try:
        seconds = timedelta(**{str(name): int(every)}).total_seconds()
    except (TypeError, ValueError) as exc:
        raise Unreadable(f"interval every={every!r} period={period!r} ({exc})") from None
    return int(seconds) if seconds == int(seconds) else seconds


def clocked_at(row: Mapping[str, Any]) -> Clocked:
    """A ``ClockedSchedule`` row: its ``clocked_time``, aware (naive is UTC, as stored)."""
    at = aware(row.get("clocked_time"))
    if at is None:
        raise Unreadable("its clocked schedule has no clocked_time")
    return Clocked(at)


def crontab_schedule(row: Mapping[str, Any]) -> crontab:
    """A ``CrontabSchedule`` row as Celery's ``crontab``: ``upsert`` translates it as config,
    keeping Celery's meaning (day of month and day of week both restricted: both must match)."""
    try:
        return crontab(
            minute=row["minute"],
            hour=row["hour"],
            day_of_week=row["day_of_week"],
            day_of_month=row["day_of_month"],
            month_of_year=row["month_of_year"],
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise Unreadable(f"crontab fields are not valid ({exc})") from None


def solar_schedule(row: Mapping[str, Any]) -> str:
    """A ``SolarSchedule`` row as ``"@solar <event> <lat> <lon>"`` (SPEC §18).

    The coordinates are ``Decimal(9, 6)`` columns: written as their exact decimal text without
    the padding zeros (``Decimal("59.437000")`` is ``59.437``), never through a float, so what
    the peer stored is what the entry says. The event is passed on as stored: one the schedule
    parser does not know is refused by it, naming the event, like any entry. Raises Unreadable.
    """
    event = row.get("event")
    event = getattr(event, "value", event)  # a reflected enum may come back as its member
    if not isinstance(event, str) or not event.strip():
        raise Unreadable(f"its solar schedule has no event ({event!r})")
    lat, lon = (_coordinate(row, column) for column in ("latitude", "longitude"))
    return f"@solar {event.strip()} {lat} {lon}"


def _coordinate(row: Mapping[str, Any], column: str) -> str:
    """A stored coordinate as the shortest decimal text that is exactly it (``59``, ``-0.5``).

    A float (a driver that hands back REAL) goes through its ``repr``: the shortest text that
    reads back as that float, which for a ``(9, 6)`` value is the decimal that was stored."""
    raw = row.get(column)
    number: Decimal | None = None
    if isinstance(raw, (Decimal, float, int, str)) and not isinstance(raw, bool):
        try:
            number = Decimal(repr(raw) if isinstance(raw, float) else str(raw).strip())
        except InvalidOperation:
            number = None
    if number is None or not number.is_finite():
        raise Unreadable(f"its solar schedule's {column} is not a number ({raw!r})")
    if number.is_zero():
        return "0"  # not "-0", nor "0E-6"
    return format(number.normalize(), "f")


def aware(value: Any) -> datetime | None:
    """A stored instant, aware; a naive one is UTC (Django and SQLite store UTC, naive)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):
        raise Unreadable(f"{value!r} is not a date and time")
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
