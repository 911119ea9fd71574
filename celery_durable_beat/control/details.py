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

from celery_durable_beat.control.views import LIST_FIELDS, Overdue, ScheduleDetail, schedule_view
from celery_durable_beat.exceptions import OccurrenceSearchError
from celery_durable_beat.model import ScheduleState
from celery_durable_beat.policy import Plan, plan_schedule, ticks_after
from celery_durable_beat.redact import redact, redact_options
from celery_durable_beat.schedules.describe import describe, describe_bounds
from celery_durable_beat.schedules.render import tick_isoformat
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


def overdue_of(record: ScheduleRecord, now_ms: int) -> Overdue | None:
    """``overdue`` of SPEC §8: ``{since, missed}`` plus the ticks the next round fires."""
    planned = overdue_plan(record, now_ms)
    if planned is None or record.next_tick_ms is None:
        return None
    tz = record.definition.tz
    return Overdue(
        since=tick_isoformat(record.next_tick_ms, tz),
        missed=len(planned.fire) + planned.dropped_count,
        fires=tuple(tick_isoformat(t, tz) for t in planned.fire),
    )


def schedule_detail(
    record: ScheduleRecord,
    *,
    now_ms: int,
    count: int,
    after_ms: int | None,
    redact_keys: Sequence[str],
) -> ScheduleDetail:
    """The ``show`` object of a stored schedule at the store's ``now_ms``."""
    view = schedule_view(record)
    d = record.definition
    return ScheduleDetail(
        **{name: getattr(view, name) for name in LIST_FIELDS},
        description=describe(d.spec) + describe_bounds(d.start_at_ms, d.end_at_ms, d.expires, d.tz),
        about=d.description,
        overdue=overdue_of(record, now_ms) if after_ms is None else None,
        next=tuple(tick_isoformat(t, d.tz) for t in upcoming(record, now_ms, count, after_ms)),
        args=tuple(redact(list(d.args), redact_keys)),
        kwargs=redact(dict(d.kwargs), redact_keys),
        options=redact_options(d.options, redact_keys),
        definition=d,
    )
