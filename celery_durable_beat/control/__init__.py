"""The control API (SPEC §8): ``DurableBeat`` and the values it returns, for every surface."""

from __future__ import annotations

from celery_durable_beat.control.api import DurableBeat
from celery_durable_beat.control.views import (
    EventView,
    HistoryPage,
    NextTick,
    ScheduleDetail,
    ScheduleView,
    StatusView,
    TriggerResult,
    UpsertStatus,
)

__all__ = [
    "DurableBeat",
    "EventView",
    "HistoryPage",
    "NextTick",
    "ScheduleDetail",
    "ScheduleView",
    "StatusView",
    "TriggerResult",
    "UpsertStatus",
]
