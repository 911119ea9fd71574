"""Which tick a task delivery belongs to: the ``periodic_*`` headers beat sets (SPEC §4, §16)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from celery_durable_beat.clock import ms_to_datetime
from celery_durable_beat.message import (
    HEADER_NAMESPACE,
    HEADER_SCHEDULE,
    HEADER_TICK_MS,
    HEADER_TRIGGER,
)
from celery_durable_beat.model import Trigger


@dataclass(frozen=True)
class PeriodicOrigin:
    """Where a task message came from, when beat sent it (SPEC §4)."""

    schedule: str
    tick_ms: int
    trigger: Trigger
    namespace: str | None = None
    """The namespace of the beat that sent it (``periodic_namespace``, SPEC §16); None for the
    default namespace. The guard claims the tick in the namespace its task id names, which beat
    makes agree with this header (``runs.base.tick_namespace``)."""

    @property
    def tick(self) -> datetime:
        """The tick instant, an aware UTC datetime."""
        return ms_to_datetime(self.tick_ms)


def _header(request: Any, name: str) -> Any:
    if isinstance(request, Mapping):
        value = request.get(name)
        headers = request.get("headers")
    else:
        value = getattr(request, name, None)
        headers = getattr(request, "headers", None)
    if value is None and isinstance(headers, Mapping):
        value = headers.get(name)
    return value


def periodic_origin(request: Any) -> PeriodicOrigin | None:
    """The tick a task request belongs to, or None for an ordinary task.

    Pass ``self.request`` of a bound task (a mapping of the same fields works too).
    """
    if request is None:
        return None
    schedule = _header(request, HEADER_SCHEDULE)
    tick_ms = _header(request, HEADER_TICK_MS)
    if not isinstance(schedule, str) or not schedule:
        return None
    if isinstance(tick_ms, str) and tick_ms.isdigit():
        tick_ms = int(tick_ms)
    if not isinstance(tick_ms, int) or isinstance(tick_ms, bool):
        return None
    try:
        trigger = Trigger(_header(request, HEADER_TRIGGER) or Trigger.AUTO.value)
    except ValueError:
        return None
    namespace = _header(request, HEADER_NAMESPACE)
    if not isinstance(namespace, str) or not namespace:
        namespace = None
    return PeriodicOrigin(schedule=schedule, tick_ms=tick_ms, trigger=trigger, namespace=namespace)
