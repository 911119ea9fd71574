"""The control API (SPEC §8): ``DurableBeat`` and the values it returns, for every surface."""

from __future__ import annotations

from celery_durable_beat.control.api import DurableBeat
from celery_durable_beat.control.check import ConfigCheck, check_config
from celery_durable_beat.control.views import (
    ActionsPage,
    ActionView,
    BackfillResult,
    BackfillTick,
    EventView,
    HistoryPage,
    NextTick,
    Overdue,
    PausedBy,
    ScheduleDetail,
    ScheduleView,
    StatusView,
    TriggerResult,
    UpsertStatus,
    WorkerView,
)

__all__ = [
    "ActionView",
    "ActionsPage",
    "BackfillResult",
    "BackfillTick",
    "ConfigCheck",
    "check_config",
    "DurableBeat",
    "EventView",
    "HistoryPage",
    "NextTick",
    "Overdue",
    "PausedBy",
    "ScheduleDetail",
    "ScheduleView",
    "StatusView",
    "TriggerResult",
    "UpsertStatus",
    "WorkerView",
]
