"""Test your own ``beat_schedule`` with a frozen clock: no sleeping, no broker (SPEC §11).

``FrozenBeat`` runs the real dispatch path (store, policies, audit, advance) on a throwaway
in-memory store whose clock is the frozen one, with a publisher that captures messages instead
of sending them::

    beat = FrozenBeat(app, start="2026-03-07T00:00:00Z")
    ticks = beat.advance("3d")
    beat.advance("5h", beat_running=False)   # beat down: time passes, nothing is dispatched
    ticks = beat.advance("1s")               # the missed-run policy decides what fires now

While running, beat wakes exactly at each due instant, so every round sees what a real beat with
a punctual clock would see.

The in-memory backends are public too, for tests of code built on the store and lease ports:

- ``MemoryStore``: the whole store contract (the SQL store's contract tests run against it) in
  this process's memory, with an injectable clock (``MemoryStore(clock=lambda: now_ms)``);
- ``MemoryLease``: the store lease on a ``MemoryStore``'s fence, so several lease objects on
  one store elect one leader, with expiry by that store's clock;
- ``MemoryRuns``: the runs port (dedup claims and run tracking, the same contract tests as the
  SQL and Redis backends), for tests of the worker guard or code that reads run states.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from celery_durable_beat.celery_config import definitions_from_app
from celery_durable_beat.clock import datetime_to_ms, ms_to_datetime
from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.lease.memory import MemoryLease
from celery_durable_beat.message import TickMessage
from celery_durable_beat.publish.capturing import CapturingPublisher
from celery_durable_beat.runs.memory import MemoryRuns
from celery_durable_beat.settings import Settings
from celery_durable_beat.signals import RoundSignals
from celery_durable_beat.store.memory import MemoryStore
from celery_durable_beat.sync import sync_definitions

__all__ = [
    "DispatchedTick",
    "FrozenBeat",
    "MemoryLease",
    "MemoryRuns",
    "MemoryStore",
    "parse_duration",
]

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_ROUNDS = 1_000_000


@dataclass(frozen=True)
class DispatchedTick:
    """One tick ``FrozenBeat`` dispatched."""

    schedule: str
    tick_ms: int
    tick: datetime
    task_id: str
    task: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    trigger: str
    options: dict[str, Any]
    """The publish options, ``expires`` included (an aware ``datetime`` or seconds)."""


def parse_duration(value: timedelta | str) -> timedelta:
    """A timedelta, or ``"90s"`` / ``"15m"`` / ``"6h"`` / ``"3d"``."""
    if isinstance(value, timedelta):
        return value
    match = _DURATION.fullmatch(value.strip())
    if not match:
        raise ValueError(f'duration {value!r} is not understood; write e.g. "90s", "15m", "3d"')
    return timedelta(seconds=float(match.group(1)) * _UNIT_SECONDS[match.group(2)])


def _parse_start(start: datetime | str) -> datetime:
    if isinstance(start, str):
        start = datetime.fromisoformat(start.replace("Z", "+00:00"))
    if start.tzinfo is None:
        raise ValueError(
            f"start {start!r} is naive; give an aware datetime or an ISO string with Z"
        )
    return start


class FrozenBeat:
    """A beat on a frozen clock over a throwaway in-memory store (the store's clock is frozen).

    Its rounds send the enqueue hooks (``celery_durable_beat.signals``) with this ``FrozenBeat``
    as ``sender``, so an app's receivers are tested on the same frozen clock."""

    def __init__(self, app: Any, start: datetime | str) -> None:
        settings = Settings.from_conf(app.conf, environ={})
        self._now_ms = datetime_to_ms(_parse_start(start))
        self.store = MemoryStore(clock=lambda: self._now_ms, namespace=settings.namespace)
        self.publisher = CapturingPublisher()
        self.dispatcher = Dispatcher(
            self.store,
            self.publisher,
            batch_size=settings.batch_size,
            quarantine_after=settings.quarantine_after,
            on_recorded=RoundSignals(self),
        )
        self.store.register_epoch(1)
        sync_definitions(self.store, definitions_from_app(app, settings), self._now_ms)

    @property
    def now(self) -> datetime:
        return ms_to_datetime(self._now_ms)

    def advance(self, by: timedelta | str, beat_running: bool = True) -> list[DispatchedTick]:
        """Move the clock on by ``by``; return the ticks dispatched meanwhile, in order."""
        delta = parse_duration(by)
        if delta < timedelta(0):
            raise ValueError(f"cannot advance by a negative duration ({by!r})")
        target = self._now_ms + round(delta.total_seconds() * 1000)
        if not beat_running:
            self._now_ms = target
            return []
        start = len(self.publisher.messages)
        for _ in range(MAX_ROUNDS):
            due = self.store.earliest_due_ms()
            if due is None or due > target:
                break
            self._now_ms = max(self._now_ms, due)
            self.dispatcher.run_round(self._now_ms, epoch=1)
        else:  # pragma: no cover - a schedule firing more than a million times in one advance
            raise RuntimeError(f"more than {MAX_ROUNDS} rounds in one advance; advance less")
        self._now_ms = target
        return [_dispatched(m) for m in self.publisher.messages[start:]]

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> FrozenBeat:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _dispatched(message: TickMessage) -> DispatchedTick:
    return DispatchedTick(
        schedule=message.schedule,
        tick_ms=message.tick_ms,
        tick=ms_to_datetime(message.tick_ms),
        task_id=message.task_id,
        task=message.task,
        args=tuple(message.args),
        kwargs=dict(message.kwargs),
        trigger=message.trigger.value,
        options=dict(message.options),
    )
