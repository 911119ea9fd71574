"""The control API's refusals before and after it reads a schedule, kept out of ``api.py``.

- **A name that cannot be stored is not looked up.** An empty name, one longer than the store's
  column (200 characters) or one holding NUL (PostgreSQL refuses NUL in text outright) is "not
  found" without a query. Other names outside SPEC §2's bounds (a newline, a tab) are looked up:
  validation refuses them now, but a row an older version stored must still be shown, paused,
  archived and deleted.
- **A row that cannot be planned is not resumed or run.** Its stored definition cannot be read,
  or its schedule or zone cannot be planned (``control/shown.py``): resuming or triggering it
  would plan from a stand-in, so the answer is a conflict that says how to repair it.
"""

from __future__ import annotations

from celery_durable_beat.control.shown import NAME_MAX, Shown
from celery_durable_beat.exceptions import ScheduleConflict, ScheduleNotFound
from celery_durable_beat.model import ScheduleState, Source
from celery_durable_beat.store.base import ScheduleRecord


def check_name(name: str) -> str:
    """``name`` when a row could hold it; else ``ScheduleNotFound``, nothing queried."""
    if not name or len(name) > NAME_MAX or "\x00" in name:
        raise ScheduleNotFound(name)
    return name


def shown_of(record: ScheduleRecord) -> Shown:
    """The ``Shown`` of a record's zone and spec (a stand-in's never plannable)."""
    readable = record.unreadable is None
    d = record.definition
    exclude_tz = d.exclude.tz if readable and d.exclude is not None else None
    return Shown(d.tz if readable else "UTC", d.spec if readable else None, exclude_tz)


def refuse_unplannable(record: ScheduleRecord, verb: str) -> None:
    """``ScheduleConflict`` when the stored definition cannot be planned from."""
    shown = shown_of(record)
    if shown.plannable:
        return
    why = record.unreadable or "; ".join(p.problem for p in shown.problems)
    raise ScheduleConflict(
        f'cannot {verb} "{record.name}": {why}; {_repair(record)}, or archive or delete it'
    )


def refuse_archived(record: ScheduleRecord, verb: str) -> None:
    if record.state is ScheduleState.ARCHIVED:
        raise ScheduleConflict(
            f'cannot {verb} "{record.name}": it is archived; {_repair(record)} to re-activate it'
        )


def _repair(record: ScheduleRecord) -> str:
    if record.source is Source.CONFIG:
        return "declare it in beat_schedule again"
    return "upsert it again"


def config_owned(name: str) -> ScheduleConflict:
    return ScheduleConflict(
        f'schedule "{name}" comes from beat_schedule (source config); change it '
        "in the config, or delete it here first to manage it through the API"
    )
