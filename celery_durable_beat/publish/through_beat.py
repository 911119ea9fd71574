"""Each tick through stock beat's ``apply_entry`` when an integration wrapped it (SPEC §17).

Sentry's ``CeleryIntegration(monitor_beat_tasks=True)`` and Datadog's tracer see a beat's work
by wrapping ``celery.beat.Scheduler.apply_entry`` (``wrappers.beat_wrappers``): Sentry sends an
``in_progress`` check-in there and adds its ``sentry-monitor-*`` headers to ``entry.options``,
and the worker side sends ``ok`` or ``error`` under the same slug. Durable beat's round never
called ``apply_entry``, so once a wrapper is in place ``celery_publisher.CeleryPublisher`` opens
an ``EntrySession`` instead of a templated or plain one, and each tick goes:

1. ``EntrySession.publish`` builds the tick's ``ScheduleEntry`` (``beat_entry.py``) and calls
   ``scheduler.apply_entry(entry, producer=...)``: the wrapper, then Celery's own
   ``apply_entry``, which calls ``scheduler.apply_async(entry, ...)``;
2. durable beat's ``Scheduler.apply_async`` finds the tick in flight (``routed_tick``) and
   ``RoutedTick.publish`` publishes it on this session, as ``CelerySession`` would: the tick's
   own task id and ``periodic_*`` headers (``send_kwargs`` puts them over whatever the wrapper
   set), the entry's arguments and options with everything the wrapper added (headers
   included), this round's producer, batch and confirms. Should ``apply_async`` itself be
   wrapped, the publish goes through that wrapper too (``_through_apply_async``).

The wrapped call *is* the publish: the round's order (publish, then audit, then advance), its
fencing and its outcomes are unchanged. ``publish`` returns the reason the inner publish failed
for, which Celery's ``apply_entry`` would have swallowed into a log line; a wrapper that raises
before publishing fails the tick (``broker_unavailable`` for a broker's error, else
``publish_error``: never a fault of the schedule's, which would count towards quarantine), one
that raises after leaves it as its publish left it (a WARNING says so), one that returns without
publishing fails it with ``publish_error`` (retried, never quarantined). Celery's
``apply_entry`` logs ``Scheduler: Sending due task`` itself; the round logs that line once the
tick is recorded (SPEC §4), so Celery's is hidden while a tick is routed (``_HideStockLine``) and
each tick keeps one line.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

from celery import beat

from celery_durable_beat.logs import cause, log_extra
from celery_durable_beat.message import TickMessage
from celery_durable_beat.model import Action, Reason
from celery_durable_beat.publish.beat_entry import beat_entry
from celery_durable_beat.publish.send_task import CelerySession, Send
from celery_durable_beat.publish.wrappers import celery_own

log = logging.getLogger("celery_durable_beat.publish")

STOCK_SENDING = "Scheduler: Sending due task %s (%s)"
"""The format of the line Celery's ``apply_entry`` logs before it calls ``apply_async``."""

_ROUTED: ContextVar[RoutedTick | None] = ContextVar("durable_beat_routed_tick", default=None)


def routed_tick(entry: Any) -> RoutedTick | None:
    """The tick ``EntrySession.publish`` is routing through ``apply_entry``, when ``entry`` is
    its entry (by name: a wrapper may pass on a copy); None outside one: ``Scheduler.apply_async``
    then behaves as stock beat's."""
    tick = _ROUTED.get()
    if tick is None or getattr(entry, "name", None) != tick.message.schedule:
        return None
    return tick


@dataclass
class RoutedTick:
    """One tick between ``EntrySession.publish`` and the ``apply_async`` it ends in."""

    message: TickMessage
    session: CelerySession
    reached: bool = False
    """``apply_async`` was called: the tick was published (or failed to be) there."""
    reason: Reason | None = None

    def publish(self, scheduler: Any, entry: Any) -> Any:
        """Publish the tick as ``entry`` now says (``Scheduler.apply_async`` calls this); an
        ``AsyncResult`` of the tick's id as stock beat returns, None if the publish failed.
        A second call (a wrapper calling the original twice) publishes nothing more."""
        if not self.reached:
            self.reached = True
            send = None
            if not celery_own(beat.Scheduler, "apply_async"):
                send = _through_apply_async(scheduler, entry)
            self.reason = self.session.publish_with(_as_entry_says(self.message, entry), send)
        return None if self.reason else scheduler.app.AsyncResult(self.message.task_id)


class EntrySession(CelerySession):
    """``CelerySession`` whose every tick goes through the scheduler's wrapped ``apply_entry``."""

    def __init__(self, *args: Any, scheduler: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.scheduler = scheduler
        _HideStockLine.install()

    def publish(self, message: TickMessage) -> Reason | None:
        entry = beat_entry(self.app, message)
        tick = RoutedTick(message, self)
        token = _ROUTED.set(tick)
        try:
            self.scheduler.apply_entry(entry, producer=self.producer)
        except Exception as exc:
            if not tick.reached:
                return self._failed_with(message, exc, self._wrapper_reason(exc))
            _log_wrapper(message, f"raised after the tick's publish: {cause(exc)}")
        finally:
            _ROUTED.reset(token)
        if not tick.reached:
            _log_wrapper(message, "returned without publishing the tick")
            return Reason.PUBLISH_ERROR
        return tick.reason

    def _wrapper_reason(self, exc: Exception) -> Reason:
        """Why a tick failed whose wrapper raised before publishing it: the broker's outage if
        that is what it raised, else ``publish_error``, never a schedule's own fault (a wrapper's
        ``TypeError`` must not quarantine the schedule it was handed)."""
        reason = self.reason_of(exc)
        return (
            Reason.BROKER_UNAVAILABLE
            if reason is Reason.BROKER_UNAVAILABLE
            else Reason.PUBLISH_ERROR
        )


def _as_entry_says(message: TickMessage, entry: Any) -> TickMessage:
    """The tick with the entry's arguments and options as the wrapper left them; its id and
    ``periodic_*`` headers stay the tick's (``send_kwargs`` sets them over the options)."""
    return replace(
        message,
        args=tuple(entry.args or ()),
        kwargs=dict(entry.kwargs or {}),
        options=dict(entry.options or {}),
    )


def _through_apply_async(scheduler: Any, entry: Any) -> Send:
    """A ``Send`` through ``celery.beat.Scheduler.apply_async`` when a wrapper replaced it: the
    entry gets the tick's keyword arguments as its options, so Celery's own ``apply_async`` at
    the end of the chain publishes exactly them (``task.apply_async`` or ``send_task``, as
    stock beat does) on this session's producer. Celery wraps what it raises in a
    ``SchedulingError``: the original is re-raised, so the reason is its own."""

    def send(producer: Any, options: dict[str, Any]) -> object:
        entry.args, entry.kwargs = options.pop("args"), options.pop("kwargs")
        entry.options = options
        try:  # the base class's (wrapped) method, not the subclass's override that called us
            return beat.Scheduler.apply_async(scheduler, entry, producer=producer, advance=False)
        except beat.SchedulingError as exc:
            original = exc.__context__
            if isinstance(original, Exception):
                raise original from None
            raise

    return send


class _HideStockLine(logging.Filter):
    """Drops Celery's ``Sending due task`` record while a tick is routed (the round logs it)."""

    _installed = False

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.msg == STOCK_SENDING and _ROUTED.get() is not None)

    @classmethod
    def install(cls) -> None:
        """Once per process, on the logger Celery's ``beat`` module logs through."""
        if not cls._installed:
            cls._installed = True
            logging.getLogger(beat.__name__).addFilter(cls())


def _log_wrapper(message: TickMessage, what: str) -> None:
    log.warning(
        "tick %s: the wrapper of celery.beat.Scheduler.apply_entry %s",
        message.task_id,
        what,
        extra=log_extra(Action.PUBLISH_RAISED, schedule=message.schedule, task_id=message.task_id),
    )
