"""The control API (SPEC §8): ``DurableBeat`` and the values it returns, for every surface."""

from __future__ import annotations

from celery_durable_beat.control.api import DurableBeat
from celery_durable_beat.control.check import ConfigCheck, check_config
from celery_durable_beat.control.views import (
    EventView,
    HistoryPage,
    NextTick,
    Overdue,
    ScheduleDetail,
    ScheduleView,
    StatusView,
    TriggerResult,
    UpsertStatus,
    WorkerView,
)

__all__ = [
    "ConfigCheck",
    "check_config",
    "DurableBeat",
    "EventView",
    "HistoryPage",
    "NextTick",
    "Overdue",
    "ScheduleDetail",
    "ScheduleView",
    "StatusView",
    "TriggerResult",
    "UpsertStatus",
    "WorkerView",
]
