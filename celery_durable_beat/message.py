"""The message of one tick, automatic or manual: what the broker side publishes (SPEC §4).

Pure, and the one place that owns the tick message's shape:

- its ``periodic_*`` header names (``HEADER_*``, ``tick_headers``): beat writes them
  (``publish/``), the worker reads them (``worker/origin.py``);
- its arguments, kwargs and options: placeholders are filled from the tick instant here, so the
  Celery side (``celery_message.py``, ``publish/``) only adds the reprs and sends;
- its task id, whose shape (format and parse, side by side) is ``ids.py``'s
  (``tick_task_id``, ``manual_task_id``, ``is_tick_id``).

Automatic ticks and manual runs are built by the same function, so the two can never disagree on
arguments, options or placeholders.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from celery_durable_beat.model import EXPIRES_NEXT_TICK, Definition, Trigger
from celery_durable_beat.schedules.render import render
from celery_durable_beat.schedules.spec import ScheduleSpec

# The headers every tick message carries (SPEC §4): the schedule, the tick instant in epoch
# milliseconds, and ``auto`` / ``manual``. Flower shows none of them, hence the readable id.
HEADER_SCHEDULE = "periodic_schedule"
HEADER_TICK_MS = "periodic_tick_ms"
HEADER_TRIGGER = "periodic_trigger"
HEADER_TASK_NAME = "periodic_task_name"
"""The schedule's name again, under the header django-celery-beat sends: django-celery-results
stores it in its ``periodic_task_name`` column (SPEC §4)."""
HEADER_NAMESPACE = "periodic_namespace"
"""The namespace the tick was made in (SPEC §16), only outside the default: the worker guard
claims under it, so one worker pool may serve several apps."""
HEADER_STOCK_BEAT = "celery_beat_task"
"""The header stock beat (Celery 5.5+) puts on every message it sends, ``True``: carried too, so
what tells a beat-sent task from others downstream keeps working (SPEC §4, message parity)."""


@dataclass(frozen=True)
class TickMessage:
    """Everything the broker side needs to publish one tick."""

    schedule: str
    task: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    options: Mapping[str, Any]
    task_id: str
    tick_ms: int
    trigger: Trigger = Trigger.AUTO
    namespace: str | None = None
    spec: ScheduleSpec | None = field(default=None, compare=False, repr=False)
    """The schedule's spec, for an integration that wraps stock beat's ``apply_entry``: it reads
    the entry's Celery schedule (``publish/beat_entry.py`` builds it from this). Not part of the
    message itself, so two messages that publish the same compare equal with or without it."""


def tick_headers(message: TickMessage) -> dict[str, Any]:
    """The ``periodic_*`` headers of ``message`` (``worker.periodic_origin`` reads them back),
    and stock beat's own ``celery_beat_task``."""
    headers: dict[str, Any] = {
        HEADER_STOCK_BEAT: True,
        HEADER_SCHEDULE: message.schedule,
        HEADER_TASK_NAME: message.schedule,
        HEADER_TICK_MS: message.tick_ms,
        HEADER_TRIGGER: message.trigger.value,
    }
    if message.namespace is not None:
        headers[HEADER_NAMESPACE] = message.namespace
    return headers


def build_message(
    name: str,
    definition: Definition,
    tick_ms: int,
    task_id: str,
    trigger: Trigger = Trigger.AUTO,
    overrides: Mapping[str, Any] | None = None,
    next_due_ms: int | None = None,
    namespace: str | None = None,
) -> TickMessage:
    """The message of the tick at ``tick_ms``; ``overrides`` are merged over the kwargs (manual
    runs), and placeholders are rendered at ``tick_ms`` in the schedule's time zone.

    ``expires`` becomes Celery's own ``expires`` option, so the worker discards a tick nobody
    started in time (and records it revoked/expired) the way it does for any expiring task:
    seconds count from the publish, as ``apply_async(expires=N)`` does; ``next_tick`` is the
    instant ``next_due_ms`` the schedule's next tick is dispatched (no expiry when it has none).
    """
    d = definition
    args: tuple[Any, ...] = d.args
    kwargs = {**d.kwargs, **overrides} if overrides else d.kwargs
    if d.has_placeholders or overrides:  # else the definition's own values, shared
        args = tuple(render(list(d.args), tick_ms, d.tz))
        kwargs = render(kwargs, tick_ms, d.tz)
    return TickMessage(
        schedule=name,
        task=d.task,
        args=args,
        kwargs=kwargs,
        options=_with_expiry(d, next_due_ms),
        task_id=task_id,
        tick_ms=tick_ms,
        trigger=trigger,
        namespace=namespace,
        spec=d.spec,
    )


def _with_expiry(definition: Definition, next_due_ms: int | None) -> Mapping[str, Any]:
    """The options with Celery's ``expires``; without one, the definition's own mapping (the
    Redis templates remember their key by it, ``publish/redis_template.py``)."""
    expires = definition.expires
    if expires == EXPIRES_NEXT_TICK and next_due_ms is not None:
        at = datetime.fromtimestamp(next_due_ms / 1000, timezone.utc)
        return {**definition.options, "expires": at}
    if isinstance(expires, (int, float)):
        return {**definition.options, "expires": float(expires)}
    return definition.options
