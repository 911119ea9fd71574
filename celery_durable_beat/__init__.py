"""celery_durable_beat: a durable, highly available replacement for Celery beat.

celery -A proj beat -S celery_durable_beat.Scheduler
"""

from __future__ import annotations

import typing as _typing

from celery_durable_beat.exceptions import (
    ConfigError,
    DurableBeatError,
    ScheduleNotFound,
)
from celery_durable_beat.ids import tick_task_id

if _typing.TYPE_CHECKING:
    from celery_durable_beat.control import DurableBeat
    from celery_durable_beat.scheduler import Scheduler
    from celery_durable_beat.worker import install, periodic_origin

__all__ = [
    "ConfigError",
    "DurableBeat",
    "DurableBeatError",
    "ScheduleNotFound",
    "Scheduler",
    "install",
    "periodic_origin",
    "tick_task_id",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> _typing.Any:
    """Import the Celery-bound parts on first use, so the pure core imports without Celery."""
    if name == "Scheduler":
        from celery_durable_beat.scheduler import Scheduler

        return Scheduler
    if name == "DurableBeat":
        from celery_durable_beat.control import DurableBeat

        return DurableBeat
    if name in ("install", "periodic_origin"):
        from celery_durable_beat import worker

        return getattr(worker, name)
    raise AttributeError(f"module 'celery_durable_beat' has no attribute {name!r}")
