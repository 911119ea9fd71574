"""Stock beat's firing instants, as its loop finds them: the reference the parity tests compare to.

Stock beat does not compute "the next occurrence": it wakes, asks each entry's schedule
``is_due(last_run_at)`` with the schedule's ``now()`` (Celery's crontab reads it in
``app.timezone``), runs what is due and sleeps ``min(next, max_interval)`` seconds. ``fires``
plays that loop on a given clock (``nowfun``), so the instants are the ones stock beat itself
would run the entry at, DST changes included, not a second opinion on cron arithmetic.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

MAX_WAKES = 100_000
"""Bound on the loop's wake-ups per call: a schedule that never comes due fails the test."""


def entry_schedule(app: Any, name: str) -> Any:
    """The schedule of ``beat_schedule[name]`` as stock beat holds it: a ``ScheduleEntry``
    made the way ``celery.beat.Scheduler`` makes one, which binds the schedule to the app (so
    a crontab written in a settings module, with no app of its own, reads ``app.timezone``)."""
    from celery.beat import ScheduleEntry

    entry = ScheduleEntry(**dict(app.conf.beat_schedule[name], name=name, app=app))
    return entry.schedule


def fires(schedule: Any, after: datetime, count: int, max_interval: float = 300.0) -> list[int]:
    """The first ``count`` instants (UTC epoch ms) after ``after`` at which stock beat runs an
    entry with ``schedule`` (a Celery ``crontab`` bound to the app), last run at ``after``.

    ``max_interval`` is beat's longest sleep (``beat_max_loop_interval``, 300 s by default):
    each wake-up is ``min(next, max_interval)`` real seconds after the one before, as in
    ``celery.beat.Scheduler.tick``.
    """
    zone = schedule.tz
    now = after.astimezone(zone)
    last, found = now, []
    for _ in range(MAX_WAKES):
        schedule.nowfun = lambda at=now: at
        due, next_s = schedule.is_due(last)
        if due:
            found.append(round(now.timestamp() * 1000))
            last = now
            if len(found) == count:
                return found
        step = timedelta(seconds=min(float(next_s), max_interval))
        now = (now.astimezone(timezone.utc) + step).astimezone(zone)
    raise AssertionError(f"stock beat ran {schedule!r} {len(found)} times in {MAX_WAKES} wakes")
