"""What every importer shares: the entries a peer yields, the import run, its report (SPEC §12).

A reader (one module per peer) turns the peer's storage into :class:`PeerEntry` values, each
either a ``beat_schedule``-style entry or the reason it cannot be carried. :func:`run_import`
hands every entry to :meth:`DurableBeat.upsert` (source ``api``, validated exactly as config,
first tick planned from now), so importers know no store, and a second run answers
``unchanged`` for every entry and moves nothing. One entry's failure (unreadable, refused by
the validator, a name config already owns) is that entry's line, never the end of the import.

django-celery-beat and sqlalchemy-celery-beat share one model (the latter mirrors the former),
so the row -> entry mapping of a periodic task lives here once: :func:`periodic_task_entry`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from celery.schedules import crontab

from celery_durable_beat.control import DurableBeat
from celery_durable_beat.exceptions import ConfigError, ScheduleConflict
from celery_durable_beat.ids import name_key
from celery_durable_beat.model import OperatorAction

STATUSES = ("created", "updated", "unchanged", "refused")
"""The word that starts each entry's outcome, in the order the total counts them."""

ONE_SHOT = "run it once with `durable-beat trigger` instead"
"""What to do with a peer's one-shot entry (``one_off``, ``clocked``): a schedule here always
repeats, and one that disables itself after a run has no counterpart."""


class Unreadable(Exception):
    """One peer entry could not be decoded; its line says why and the import goes on."""


@dataclass(frozen=True)
class PeerEntry:
    """One schedule as the peer stores it: an entry to upsert, or the reason it is refused."""

    name: str
    entry: dict[str, Any] | None = None
    refused: str | None = None

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
        """``nightly: created``; ``report: refused: solar schedules have no counterpart (...)``."""
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
        status = beat.upsert(
            peer.name, peer.entry, dry_run=dry_run, reason=reason, action=OperatorAction.IMPORT
        )
    except ConfigError as exc:
        return ImportLine(peer.name, "refused", "; ".join(p.problem for p in exc.problems))
    except ScheduleConflict as exc:
        return ImportLine(peer.name, "refused", str(exc))
    return ImportLine(peer.name, str(status.value))


# -- the django-celery-beat model, shared by sqlalchemy-celery-beat ---------------------------
def periodic_task_entry(
    task: Mapping[str, Any], schedule: Any, tz: str | None, now: datetime
) -> PeerEntry:
    """A ``PeriodicTask`` row (django-celery-beat's columns) and its decoded schedule.

    ``schedule`` is seconds (interval), a ``crontab`` (with ``tz``, its zone), or a
    :class:`PeerEntry` refusal for a kind without a counterpart. Raises Unreadable.
    """
    name = str(task["name"])
    if isinstance(schedule, PeerEntry):
        return schedule
    refusal = _one_shot_refusal(task, now)
    if refusal is not None:
        return PeerEntry.refuse(name, refusal)
    entry: dict[str, Any] = {
        "task": task["task"],
        "schedule": schedule,
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
    return PeerEntry(name, entry)


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


def _one_shot_refusal(task: Mapping[str, Any], now: datetime) -> str | None:
    """``one_off`` has no counterpart; an ``expires`` already past leaves nothing to run."""
    if task.get("one_off"):
        return f"one_off (disable after one run) has no counterpart; {ONE_SHOT}"
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


def aware(value: Any) -> datetime | None:
    """A stored instant, aware; a naive one is UTC (Django and SQLite store UTC, naive)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):
        raise Unreadable(f"{value!r} is not a date and time")
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
