"""A tick as stock beat would hand it to ``apply_entry``: a ``celery.beat.ScheduleEntry``.

An integration that wraps ``apply_entry`` (``wrappers.py``) reads the entry it is given: Sentry
names its Crons monitor after ``entry.name`` and derives the monitor's schedule and zone from
``entry.schedule`` (a ``crontab``'s five fields as written, or a ``schedule``'s seconds), and
adds its headers to ``entry.options``. So the entry carries the tick's name, task, arguments and
options, and the Celery schedule stock beat would have had for the same definition
(``celery_schedule``):

- a cron spec: ``crontab`` of its five fields (a six-field spec whose seconds field is ``0``:
  of the other five), in the schedule's zone (``tz``: what Sentry reports as the monitor's
  timezone); a field Celery's crontab does not parse (``L``, ``5#2``, ``7`` for Sunday, ``?``)
  or seconds other than ``0`` has no equivalent;
- an interval: ``schedule(timedelta)`` of its period, in the app's zone as stock beat's;
- a solar event: Celery's ``solar`` of the same event and place; a custom class (SPEC §18): the
  config's own object;
- anything else (an ``@at`` one-off, a recurrence rule: kinds Celery has no class for):
  ``NoCeleryEquivalent``,
  a ``BaseSchedule`` that says what the schedule is and is neither a crontab nor an interval,
  so Sentry, as for such a schedule under stock beat, logs that it does not support it and
  sends no check-in.

The entry holds copies: a wrapper may change what it was given, and the definition's own values
are shared by every tick of it.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

from celery import beat
from celery.schedules import BaseSchedule, crontab, schedule, solar

from celery_durable_beat.message import TickMessage
from celery_durable_beat.schedules.custom import CustomSpec, loaded_custom
from celery_durable_beat.schedules.solar import SolarSpec
from celery_durable_beat.schedules.spec import CronSpec, IntervalSpec, ScheduleSpec


class NoCeleryEquivalent(BaseSchedule):  # type: ignore[misc]  # Celery is untyped
    """The schedule of an entry whose definition no Celery schedule class expresses.

    It only describes (``text``, the schedule as durable beat reads it): the times come from the
    durable store, never from this object, so it computes none.
    """

    def __init__(self, text: str, app: Any = None) -> None:
        super().__init__(app=app)
        self.text = text

    def __repr__(self) -> str:
        return f"<no Celery equivalent: {self.text}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NoCeleryEquivalent) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


def celery_schedule(spec: ScheduleSpec | None, app: Any) -> BaseSchedule:
    """The Celery schedule stock beat would hold for ``spec`` (see the module docstring)."""
    if isinstance(spec, IntervalSpec):
        return schedule(timedelta(milliseconds=spec.every_ms), app=app)
    if isinstance(spec, CronSpec):
        fields = spec.fields
        if spec.has_seconds and fields[0] == "0":
            fields = fields[1:]
        if len(fields) == 5:
            minute, hour, day_of_month, month_of_year, day_of_week = fields
            try:
                entry_schedule = crontab(
                    minute=minute,
                    hour=hour,
                    day_of_month=day_of_month,
                    month_of_year=month_of_year,
                    day_of_week=day_of_week,
                    app=app,
                )
            except ValueError:  # Celery's parser refuses the field: no equivalent
                pass
            else:
                entry_schedule.tz = ZoneInfo(spec.tz)  # a cached property: this entry's zone
                return entry_schedule
    if isinstance(spec, SolarSpec):
        return solar(spec.event, spec.lat, spec.lon, app=app)
    if isinstance(spec, CustomSpec):
        found = loaded_custom(spec)  # the config's own object, as stock beat would hold it
        if isinstance(found, BaseSchedule):
            return found
    return NoCeleryEquivalent(spec.text() if spec is not None else "unknown", app)


def beat_entry(app: Any, message: TickMessage) -> beat.ScheduleEntry:
    """The ``ScheduleEntry`` of the tick ``message``: its schedule's name, task, arguments and
    options (copies), its Celery schedule, and the tick's instant as ``last_run_at``."""
    return beat.ScheduleEntry(
        name=message.schedule,
        task=message.task,
        schedule=celery_schedule(message.spec, app),
        args=tuple(copy.deepcopy(list(message.args))),
        kwargs=copy.deepcopy(dict(message.kwargs)),
        options=copy.deepcopy(dict(message.options)),
        last_run_at=datetime.fromtimestamp(message.tick_ms / 1000, timezone.utc),
        app=app,
    )
