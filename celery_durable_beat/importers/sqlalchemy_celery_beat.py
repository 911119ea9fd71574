"""sqlalchemy-celery-beat: its tables, read by SQL (the package itself is not needed).

It mirrors django-celery-beat's model with other table names (``celery_periodictask``,
``celery_intervalschedule``, ``celery_crontabschedule``, ...) in the schema ``beat_schema``
names (the default one when unset), and a generic reference instead of four foreign keys:
``discriminator`` (the schedule class name, lower-cased) and ``schedule_id``. The mapping of a
task row is django-celery-beat's (``base.periodic_task_entry``), solar schedules included
(``"@solar <event> <lat> <lon>"``, SPEC §18).
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

KIND = "sqlalchemy-celery-beat"
TASKS = "celery_periodictask"
INTERVALS = "celery_intervalschedule"
CRONTABS = "celery_crontabschedule"
CLOCKED = "celery_clockedschedule"
SOLAR = "celery_solarschedule"
SCHEDULES = {
    "intervalschedule": INTERVALS,
    "crontabschedule": CRONTABS,
    "solarschedule": SOLAR,
    "clockedschedule": CLOCKED,
}
"""Each schedule table by the ``discriminator`` that names it."""


def read_entries(url: str, now: datetime) -> list[PeerEntry]:
    """Every periodic task, in name order, as an entry or a refusal; the tasks and the
    schedule rows they point at are read in one connection."""
    with connect(url, KIND) as conn:
        tables = find_tables(conn, KIND, url, TASKS, (TASKS, *SCHEDULES.values()))
        rows = {kind: tables.by_id(conn, table) for kind, table in SCHEDULES.items()}
        tasks = sorted(tables.rows(conn, TASKS), key=lambda row: str(row["name"]))
    return [_entry(task, rows, now) for task in tasks]


def _entry(
    task: Mapping[str, Any], schedules: Mapping[str, Mapping[Any, Mapping[str, Any]]], now: datetime
) -> PeerEntry:
    name = str(task["name"])
    try:
        schedule, tz = _schedule(task, schedules)
        return periodic_task_entry(task, schedule, tz, now)
    except Unreadable as exc:
        return PeerEntry.refuse(name, f"unreadable: {exc}")


def _schedule(
    task: Mapping[str, Any], schedules: Mapping[str, Mapping[Any, Mapping[str, Any]]]
) -> tuple[Any, str | None]:
    kind = str(task.get("discriminator") or "")
    if kind not in schedules:
        raise Unreadable(f"schedule kind {kind!r} is not one sqlalchemy-celery-beat defines")
    row = schedules[kind].get(task.get("schedule_id"))
    if row is None:
        raise Unreadable(f"its {kind} (id {task.get('schedule_id')}) is missing")
    if kind == "intervalschedule":
        return interval_seconds(row["every"], row["period"]), None
    if kind == "clockedschedule":
        return clocked_at(row), None
    if kind == "solarschedule":
        return solar_schedule(row), None
    return crontab_schedule(row), (str(row["timezone"]) if row.get("timezone") else None)
