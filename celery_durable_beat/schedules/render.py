"""Placeholders in args and kwargs: ``{{scheduled_for}}`` and ``{{scheduled_for_ms}}``.

They are filled from the tick, never from the wall clock, so a catch-up tick dispatched hours
late still carries the instant it was planned for. ``{{scheduled_for}}`` is ISO 8601 in the
schedule's zone, with its offset.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from celery_durable_beat.schedules.dst import zone

_MARKERS = ("{{scheduled_for}}", "{{scheduled_for_ms}}")


def tick_isoformat(tick_ms: int, tz: str) -> str:
    """The tick in its schedule's zone, ISO 8601 with offset (milliseconds only when present)."""
    instant = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=tick_ms)
    local = instant.astimezone(zone(tz))
    return local.isoformat(timespec="milliseconds" if tick_ms % 1000 else "seconds")


def has_placeholders(value: Any) -> bool:
    """Whether ``render`` would change anything in ``value``."""
    if isinstance(value, str):
        return any(marker in value for marker in _MARKERS)
    if isinstance(value, Mapping):
        return any(has_placeholders(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(has_placeholders(item) for item in value)
    return False


def render(value: Any, tick_ms: int, tz: str) -> Any:
    """A copy of ``value`` with the placeholders of every nested string filled in.

    The filled-in texts are made only when a string holds a placeholder: most ticks have none,
    and formatting the instant in its zone was most of the cost of rendering them."""
    return _render(value, _Values(tick_ms, tz))


class _Values:
    """The placeholder texts of one tick, each made on first use."""

    __slots__ = ("_texts", "_tick_ms", "_tz")

    def __init__(self, tick_ms: int, tz: str) -> None:
        self._tick_ms = tick_ms
        self._tz = tz
        self._texts: dict[str, str] | None = None

    def __getitem__(self, marker: str) -> str:
        if self._texts is None:
            self._texts = {
                "{{scheduled_for}}": tick_isoformat(self._tick_ms, self._tz),
                "{{scheduled_for_ms}}": str(self._tick_ms),
            }
        return self._texts[marker]


def _render(value: Any, values: _Values) -> Any:
    if isinstance(value, str):
        if "{{" not in value:
            return value
        for marker in _MARKERS:
            if marker in value:
                value = value.replace(marker, values[marker])
        return value
    if isinstance(value, Mapping):
        return {key: _render(item, values) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_render(item, values) for item in value)
    return value
