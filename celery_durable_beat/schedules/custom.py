"""Custom schedule classes (SPEC §18): a team's own ``BaseSchedule`` subclass with ``next_after``.

Code cannot be stored, so a custom spec is stored as what identifies the object: its class's
import path and its ``repr()``. A change of either is a changed definition, which re-plans the
schedule (SPEC §3). The object itself lives only in the processes that loaded the app's
``beat_schedule``: reading the config registers it here (:func:`custom_spec`), and the occurrence
engine asks the registered object. A process that has not loaded that config (an API server
started without the app's schedules, say) cannot compute the schedule's ticks and says so with
:class:`~celery_durable_beat.exceptions.OccurrenceSearchError`, which the round answers by
quarantining that one schedule, never by guessing.

``next_after`` gets an aware UTC ``datetime`` and answers the first occurrence strictly after
it, aware, or ``None`` once the schedule has ended. A tick is that instant rounded *up* to the
millisecond, so it stays strictly after the instant asked about, and asking again from the tick
gives the following occurrence. Anything else it answers (a naive datetime, an instant not after
the one asked about, another type) is an error naming the class, never a tick.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from celery_durable_beat.exceptions import OccurrenceSearchError
from celery_durable_beat.schedules.errors import SpecError

METHOD = "next_after"
"""The one method a custom class must define."""

REPR_MAX = 500
"""Longest ``repr()`` stored: a longer one is refused, since it is part of every definition."""

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ONE_MS = timedelta(milliseconds=1)


class NextAfter(Protocol):
    """What a custom schedule object offers."""

    def next_after(self, instant: datetime) -> datetime | None: ...  # pragma: no cover


@dataclass(frozen=True)
class CustomSpec:
    """A custom schedule object, named by its class's import path and its ``repr()``.

    ``tz`` is only the zone its ticks are shown and its ``exclude`` dates read in.
    """

    path: str
    shown: str
    tz: str = "UTC"

    def text(self) -> str:
        """How lists and pages show it: ``custom proj.schedules:Weekdays Weekdays(hour=9)``."""
        return f"custom {self.path} {self.shown}"


_loaded: dict[tuple[str, str], Any] = {}
_lock = threading.Lock()


def class_path(obj: object) -> str:
    """``module:QualName`` of the object's class."""
    cls = type(obj)
    return f"{cls.__module__}:{cls.__qualname__}"


def custom_spec(obj: object, tz: str) -> CustomSpec:
    """The spec of a custom schedule object read from config, which is registered for this
    process's occurrence searches; raises :class:`SpecError` for an object without
    ``next_after``."""
    path = class_path(obj)
    method = getattr(obj, METHOD, None)
    if not callable(method):
        raise SpecError(
            f"{path} is a custom schedule class without a {METHOD}() method, so its ticks "
            f"cannot be known ahead; define {METHOD}(self, instant: datetime) -> datetime | None "
            "(the first occurrence strictly after an aware instant; None once it has ended), "
            "or use a cron string, '@every 30s', crontab() or schedule()"
        )
    shown = repr(obj)
    if len(shown) > REPR_MAX or any(ord(ch) < 32 for ch in shown):
        raise SpecError(
            f"repr() of {path} is {len(shown)} characters or holds control characters; it is "
            f"stored as the schedule's identity, so give the class a __repr__ of one line of "
            f"at most {REPR_MAX} characters that names its parameters"
        )
    spec = CustomSpec(path, shown, tz)
    with _lock:
        _loaded[(path, shown)] = obj
    return spec


def loaded_custom(spec: CustomSpec) -> object | None:
    """The object registered for ``spec`` in this process, or None."""
    return _loaded.get((spec.path, spec.shown))


def next_custom_ms(spec: CustomSpec, after_ms: int) -> int | None:
    """The registered object's first tick strictly after ``after_ms``; None once it ended."""
    obj = _loaded.get((spec.path, spec.shown))
    if obj is None:
        raise OccurrenceSearchError(
            f"custom schedule {spec.path} {spec.shown} is not loaded in this process: its "
            "ticks come from the object in the app's beat_schedule; run this with -A <the app>"
        )
    instant = _EPOCH + timedelta(milliseconds=after_ms)
    try:
        found = obj.next_after(instant)
    except Exception as exc:
        raise OccurrenceSearchError(
            f"{spec.path}.{METHOD}({instant.isoformat()}) raised {type(exc).__name__}: {exc}"
        ) from exc
    if found is None:
        return None
    return _tick_ms(spec, instant, found)


def _tick_ms(spec: CustomSpec, instant: datetime, found: Any) -> int:
    """``found`` as a tick: checked, then rounded up to the millisecond."""
    asked = f"{spec.path}.{METHOD}({instant.isoformat()})"
    if not isinstance(found, datetime):
        raise OccurrenceSearchError(
            f"{asked} answered a {type(found).__name__}; answer an aware datetime or None"
        )
    if found.tzinfo is None or found.utcoffset() is None:
        raise OccurrenceSearchError(
            f"{asked} answered the naive {found.isoformat()}; answer an aware datetime"
        )
    if found <= instant:
        raise OccurrenceSearchError(
            f"{asked} answered {found.isoformat()}, not after the instant it was asked about; "
            "answer the first occurrence strictly after it"
        )
    return -((_EPOCH - found) // _ONE_MS)


@dataclass(frozen=True)
class CustomObject:
    """A custom schedule object handed from the Celery edge to ``parse_schedule``, which makes
    it a :class:`CustomSpec` in the entry's zone (the edge does not know the zone)."""

    obj: object
