"""The pure schedule layer: specs, parsing, validation and occurrences. No I/O lives here."""

from celery_durable_beat.schedules.errors import SpecError
from celery_durable_beat.schedules.occurrences import (
    MAX_ENUMERATION,
    count_ticks,
    next_tick,
    ticks_between,
)
from celery_durable_beat.schedules.spec import (
    CronFields,
    CronSpec,
    DayRule,
    IntervalSpec,
    ParsedSchedule,
    ScheduleSpec,
    parse_schedule,
)

__all__ = [
    "MAX_ENUMERATION",
    "CronFields",
    "CronSpec",
    "DayRule",
    "IntervalSpec",
    "ParsedSchedule",
    "ScheduleSpec",
    "SpecError",
    "count_ticks",
    "next_tick",
    "parse_schedule",
    "ticks_between",
]
