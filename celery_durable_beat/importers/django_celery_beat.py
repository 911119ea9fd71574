"""django-celery-beat: its tables, read by SQL from the Django database (Django not needed).

``django_celery_beat_periodictask`` points at one of four schedule tables through nullable
foreign keys (``interval_id``, ``crontab_id``, ``solar_id``, ``clocked_id``). Interval, crontab
and solar schedules are carried, with ``start_time`` / ``expires`` as ``start_at`` /
``end_at``; a solar one becomes ``"@solar <event> <lat> <lon>"`` (SPEC §18); a clocked one
``@at`` its ``clocked_time``, a ``one_off`` repeating task ``@at`` its next occurrence
(``base.periodic_task_entry``). A crontab's ``timezone`` column becomes the entry's ``tz``; a
solar event is an instant, the same in every zone, so it takes none.

The four schedule tables and the tasks are read in one connection (``sql.connect``), so the
rows the tasks point at are the rows of the same moment.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from celery_durable_beat.importers.base import (
    PeerEntry,
    Unreadable,
    clocked_at,
    crontab_schedule,
    interval_seconds,
    periodic_task_entry,
    solar_schedule,
)
from celery_durable_beat.importers.sql import connect, find_tables

KIND = "django-celery-beat"
PREFIX = "django_celery_beat_"
TASKS = PREFIX + "periodictask"
INTERVALS = PREFIX + "intervalschedule"
CRONTABS = PREFIX + "crontabschedule"
CLOCKED = PREFIX + "clockedschedule"
SOLAR = PREFIX + "solarschedule"
SCHEDULES = {"interval": INTERVALS, "crontab": CRONTABS, "solar": SOLAR, "clocked": CLOCKED}
"""Each schedule table by the task column that points at it, less ``_id``."""


def read_entries(url: str, now: datetime) -> list[PeerEntry]:
    """Every periodic task, in name order, as an entry or a refusal (a schedule table the
    peer's version lacks holds no rows: reflection reads whatever version wrote the tables)."""
    with connect(url, KIND) as conn:
        tables = find_tables(conn, KIND, url, TASKS, (TASKS, *SCHEDULES.values()))
        rows = {kind: tables.by_id(conn, table) for kind, table in SCHEDULES.items()}
        tasks = sorted(tables.rows(conn, TASKS), key=lambda row: str(row["name"]))
    return [_entry(task, rows, now) for task in tasks]


Tables = Mapping[str, Mapping[Any, Mapping[str, Any]]]


def _entry(task: Mapping[str, Any], tables: Tables, now: datetime) -> PeerEntry:
    name = str(task["name"])
    try:
        schedule, tz = _schedule(task, tables)
        return periodic_task_entry(task, schedule, tz, now)
    except Unreadable as exc:
        return PeerEntry.refuse(name, f"unreadable: {exc}")


def _schedule(task: Mapping[str, Any], tables: Tables) -> tuple[Any, str | None]:
    if task.get("interval_id") is not None:
        row = _row(tables["interval"], task["interval_id"], "interval")
        return interval_seconds(row["every"], row["period"]), None
    if task.get("crontab_id") is not None:
        row = _row(tables["crontab"], task["crontab_id"], "crontab")
        return crontab_schedule(row), (str(row["timezone"]) if row.get("timezone") else None)
    if task.get("solar_id") is not None:
        return solar_schedule(_row(tables["solar"], task["solar_id"], "solar")), None
    if task.get("clocked_id") is not None:
        return clocked_at(_row(tables["clocked"], task["clocked_id"], "clocked")), None
    raise Unreadable("no schedule: interval, crontab, solar and clocked are all empty")


def _row(rows: Mapping[Any, Mapping[str, Any]], key: Any, kind: str) -> Mapping[str, Any]:
    try:
        return rows[key]
    except KeyError:
        raise Unreadable(f"its {kind} schedule (id {key}) is missing") from None
