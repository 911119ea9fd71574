"""sqlalchemy-celery-beat: its tables, read by SQL (the package itself is not needed).

It mirrors django-celery-beat's model with other table names (``celery_periodictask``,
``celery_intervalschedule``, ``celery_crontabschedule``, ...) in the schema ``beat_schema``
names (the default one when unset), and a generic reference instead of four foreign keys:
``discriminator`` (the schedule class name, lower-cased) and ``schedule_id``. The mapping of a
task row is django-celery-beat's (``base.periodic_task_entry``).
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
)
from celery_durable_beat.importers.sql import read_task_tables

KIND = "sqlalchemy-celery-beat"
TASKS = "celery_periodictask"
INTERVALS = "celery_intervalschedule"
CRONTABS = "celery_crontabschedule"
CLOCKED = "celery_clockedschedule"
REFUSED = {
    "solarschedule": "solar schedules have no counterpart (use a cron expression with a tz)",
}


def read_entries(url: str, now: datetime) -> list[PeerEntry]:
    """Every periodic task, in name order, as an entry or a refusal."""
    tasks, intervals, crontabs, clocked = read_task_tables(
        url, KIND, TASKS, INTERVALS, CRONTABS, CLOCKED
    )
    schedules = {
        "intervalschedule": intervals,
        "crontabschedule": crontabs,
        "clockedschedule": clocked,
    }
    return [_entry(task, schedules, now) for task in tasks]


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
    if kind in REFUSED:
        return PeerEntry.refuse(str(task["name"]), REFUSED[kind]), None
    if kind not in schedules:
        raise Unreadable(f"schedule kind {kind!r} is not one sqlalchemy-celery-beat defines")
    row = schedules[kind].get(task.get("schedule_id"))
    if row is None:
        raise Unreadable(f"its {kind} (id {task.get('schedule_id')}) is missing")
    if kind == "intervalschedule":
        return interval_seconds(row["every"], row["period"]), None
    if kind == "clockedschedule":
        return clocked_at(row), None
    return crontab_schedule(row), (str(row["timezone"]) if row.get("timezone") else None)
