"""The message of one tick, automatic or manual: what the broker side publishes (SPEC §4).

Pure: placeholders are filled from the tick instant here, the Celery side (``publish.py``) only
adds headers and sends. Automatic ticks and manual runs are built by the same function, so the
two can never disagree on arguments, options or placeholders.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from celery_durable_beat.model import Definition, Trigger
from celery_durable_beat.schedules.render import render


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


def build_message(
    name: str,
    definition: Definition,
    tick_ms: int,
    task_id: str,
    trigger: Trigger = Trigger.AUTO,
    overrides: Mapping[str, Any] | None = None,
) -> TickMessage:
    """The message of the tick at ``tick_ms``; ``overrides`` are merged over the kwargs (manual
    runs), and placeholders are rendered at ``tick_ms`` in the schedule's time zone."""
    d = definition
    return TickMessage(
        schedule=name,
        task=d.task,
        args=tuple(render(list(d.args), tick_ms, d.tz)),
        kwargs=render({**d.kwargs, **(overrides or {})}, tick_ms, d.tz),
        options=dict(d.options),
        task_id=task_id,
        tick_ms=tick_ms,
        trigger=trigger,
    )
