"""What ``show`` and ``next`` say about one schedule: what will really happen, from the store's now.

Pure functions of a stored schedule and the store's clock, so the unit tests pin "now":

- **Overdue is said, not shown as "next".** When the stored next tick is already due (no beat
  ran), the schedule is ``overdue``: since that tick, how many occurrences are due, and which of
  them the missed-run policy fires on the next round, planned by the same
  ``policy.plan_schedule`` the leader's round uses, at the same instant.
- **``next`` holds the ticks after that**: for an overdue schedule the plan's next tick onwards,
  for an active one its stored next tick onwards, for a stopped one the occurrences after now
  (the text output says they will not fire until resumed).
- **Values are redacted** with ``durable_beat_redact`` (``redact.redact``) before they leave.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress

from celery_durable_beat.control.lookups import shown_of
from celery_durable_beat.control.shown import INVALID, FieldProblem, Shown
from celery_durable_beat.control.views import (
    LIST_FIELDS,
    Overdue,
    ScheduleDetail,
    ScheduleView,
    schedule_view,
)
from celery_durable_beat.exceptions import OccurrenceSearchError
from celery_durable_beat.model import Definition, ScheduleState
from celery_durable_beat.policy import Plan, plan_schedule, ticks_after
from celery_durable_beat.redact import redact, redact_options
from celery_durable_beat.schedules.describe import describe, describe_bounds, describe_exclude
from celery_durable_beat.store.base import ScheduleRecord


def overdue_plan(record: ScheduleRecord, now_ms: int) -> Plan | None:
    """The next round's plan when the schedule is overdue at ``now_ms``, else None.

    Overdue: active, and its stored tick's dispatch instant (tick + jitter) is not ahead.
    """
    if record.state is not ScheduleState.ACTIVE or record.next_tick_ms is None:
        return None
    if record.next_due_ms is None or record.next_due_ms > now_ms:
        return None
    return plan_schedule(record.name, record.definition, record.next_tick_ms, now_ms)


def upcoming(record: ScheduleRecord, now_ms: int, count: int, after_ms: int | None) -> list[int]:
    """The next ``count`` tick instants (epoch ms) beat will fire, none of them already due.

    With ``after_ms`` they are simply the schedule's occurrences after that instant.
    """
    ticks: list[int] = []
    cursor = now_ms if after_ms is None else after_ms
    if after_ms is None:
        overdue = overdue_plan(record, now_ms)
        first = record.next_tick_ms if overdue is None else overdue.next_tick_ms
        active = record.state is ScheduleState.ACTIVE
        if active and (overdue is not None or record.next_tick_ms is not None):
            if first is None:
                return []  # past its end_at: nothing more will fire
            ticks.append(first)  # beat's own plan (a jittered tick included)
            cursor = first
    with suppress(OccurrenceSearchError):  # a cron with no further occurrence: what there is
        ticks += ticks_after(record.definition, cursor, count - len(ticks))
    return ticks[:count]


def overdue_of(record: ScheduleRecord, now_ms: int, shown: Shown) -> Overdue | None:
    """``overdue`` of SPEC §8: ``{since, missed}`` plus the ticks the next round fires."""
    planned = overdue_plan(record, now_ms)
    if planned is None or record.next_tick_ms is None:
        return None
    since = shown.instant("overdue", record.next_tick_ms)
    fires = [shown.instant("overdue", t) for t in planned.fire]
    if since is None or None in fires:
        return None
    return Overdue(
        since=since,
        missed=len(planned.fire) + planned.dropped_count,
        fires=tuple(t for t in fires if t is not None),
    )


def schedule_detail(
    record: ScheduleRecord,
    *,
    now_ms: int,
    count: int,
    after_ms: int | None,
    redact_keys: Sequence[str],
) -> ScheduleDetail:
    """The ``show`` object of a stored schedule at the store's ``now_ms``.

    What is planned from the stored values (``overdue``, ``next``, the words) goes through
    ``Shown.planned``, so a row whose values cannot be planned still shows (``invalid``).
    """
    view = schedule_view(record)
    d = record.definition
    shown = shown_of(record)
    shown.problems.clear()  # the view named the tz and schedule already
    overdue = None
    if after_ms is None:
        overdue = shown.planned("overdue", lambda: overdue_of(record, now_ms, shown), None)
    none: list[int] = []
    ticks = shown.planned("next", lambda: upcoming(record, now_ms, count, after_ms), none)
    shown_ticks = [shown.instant("next", t) for t in ticks]
    return ScheduleDetail(
        **{name: getattr(view, name) for name in LIST_FIELDS},
        description=shown.planned("description", lambda: _words(view, d), INVALID),
        about=d.description,
        overdue=overdue,
        next=tuple(t for t in shown_ticks if t is not None),
        args=tuple(redact(list(shown.payload("args", d.args, ())), redact_keys)),
        kwargs=redact(dict(shown.payload("kwargs", d.kwargs, {})), redact_keys),
        options=redact_options(shown.payload("options", d.options, {}), redact_keys),
        invalid=_merged(view.invalid, shown.problems),
        definition=d,
    )


def _words(view: ScheduleView, d: Definition) -> str:
    """The schedule in words, with the bounds only when the view could show them."""
    hidden = (view.start_at is None and d.start_at_ms is not None) or (
        view.end_at is None and d.end_at_ms is not None
    )
    bounds = "" if hidden else describe_bounds(d.start_at_ms, d.end_at_ms, view.expires, view.tz)
    return describe(d.spec) + describe_exclude(d.exclude) + bounds


def _merged(
    first: Sequence[FieldProblem], then: Sequence[FieldProblem]
) -> tuple[FieldProblem, ...]:
    """Both lists of problems, each (field, problem) once, in order."""
    return tuple(dict.fromkeys((*first, *then)))
