"""Enqueue hooks (SPEC §17): Celery-style signals sent once a tick's record is committed.

Why signals: Celery users already hook ``task_prerun`` or ``beat_init`` with ``@x.connect``;
these two work the same way (``celery.utils.dispatch.Signal``), so posting to Slack, paging, or
feeding a dashboard on a skipped tick needs no new idiom::

    from celery_durable_beat.signals import tick_enqueued, tick_skipped

    @tick_skipped.connect
    def on_skip(sender, schedule, tick, reason, **kwargs):
        ...

- ``tick_enqueued(sender, schedule, tick, tick_ms, task_id, trigger)``: a tick was published
  and its ``enqueued`` record is written (committed). ``tick`` is the planned instant, an aware
  UTC ``datetime`` (``tick_ms`` the same in epoch milliseconds); ``trigger`` one of ``"auto"``,
  ``"manual"``, ``"backfill"``, ``"redeliver"`` (``model.Trigger``'s values).
- ``tick_skipped(sender, schedule, tick, tick_ms, reason, trigger, task_id, count, last_tick)``:
  a round recorded a tick ``skipped``. ``reason`` is one of ``"no_worker"``, ``"quarantined"``,
  ``"missed"``, ``"too_late"``, ``"overlap"``, ``"failures"`` (``model.Reason``'s values);
  ``trigger`` is ``"auto"`` (only rounds skip); ``task_id`` the id the tick would have had when
  it was held back at its publish (``overlap``, ``no_worker``), else None; ``count`` how many
  ticks the record covers (a ``missed`` / ``too_late`` record states a whole range, SPEC §4) and
  ``last_tick`` the last of them (``tick`` itself when ``count`` is 1).

Words are plain ``str`` (not the enums: ``f"{reason}"`` reads ``missed``, and a JSON line needs
no encoder). Always accept ``**kwargs``: a later version may send more fields.

Who sends, and ``sender``: the beat process's ``Scheduler`` for every tick its rounds record,
automatic and redelivered (``trigger`` ``auto`` / ``redeliver``); ``testing.FrozenBeat`` for the
rounds it runs, so the receivers of an app can be tested on a frozen clock; the ``DurableBeat``
a manual run or a backfill went through (``trigger`` ``manual`` / ``backfill``: the CLI, ``serve``
or your own code, in that process). Connect with no ``sender`` to hear them all. A
``Dispatcher`` built by hand sends only when given ``on_recorded=RoundSignals(sender)``.

What is never sent: ``failed`` and ``deduplicated`` records (a failed tick is retried, and a
deduplicated one was announced when it was enqueued), and the records config sync writes itself
(``replanned``; the ``missed`` record of an ``@at`` already past when it is declared): no
round decided those. A receiver runs in the round's thread after the commit, so it is
at-most-once: a beat killed between the commit and the send never sends it. A slow receiver
delays the round (hand slow work to a thread: ``examples/monitoring/slack_on_skip.py``).

A receiver that raises is logged (action ``hook_failed``, with its traceback) and the other
receivers and the round go on; one that raises again within the same round is counted, not
logged again, so a burst of 10,000 ticks writes two lines, not 10,000 tracebacks. With no
receiver connected a round pays one check of each signal's ``receivers`` list and builds nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from celery.utils.dispatch import Signal

from celery_durable_beat.clock import ms_to_datetime
from celery_durable_beat.logs import cause, log_extra
from celery_durable_beat.model import Action, Outcome
from celery_durable_beat.store.base import AuditEvent

__all__ = [
    "RoundSignals",
    "TickSignal",
    "recorded",
    "tick_enqueued",
    "tick_skipped",
]

log = logging.getLogger("celery_durable_beat.signals")

_Failing = dict[tuple[str, str], int]
"""(signal, receiver) -> how many more times it raised this round, after the line logged."""


class TickSignal(Signal):  # type: ignore[misc]  # celery is untyped
    """Celery's ``Signal`` whose ``send`` logs a raising receiver in this package's vocabulary
    (``Action.HOOK_FAILED``) instead of Celery's untagged line; ``connect``, ``disconnect`` and
    ``receivers`` are Celery's own."""

    def send(self, sender: Any, **named: Any) -> list[tuple[Any, Any]]:
        """Call every live receiver; ``(receiver, response or exception)`` for each."""
        return _deliver(self, sender, named, None)


tick_enqueued = TickSignal(
    name="tick_enqueued", providing_args={"schedule", "tick", "tick_ms", "task_id", "trigger"}
)
"""A tick's ``enqueued`` record is committed (module docstring)."""
tick_skipped = TickSignal(
    name="tick_skipped",
    providing_args={
        "schedule",
        "tick",
        "tick_ms",
        "reason",
        "trigger",
        "task_id",
        "count",
        "last_tick",
    },
)
"""A round recorded a tick ``skipped`` (module docstring)."""


class RoundSignals:
    """What a round calls with its records once they are committed (``Dispatcher``'s and
    ``RedeliverySweep``'s ``on_recorded``): the round knows only this callable, never Celery
    (import-linter keeps the round free of it)."""

    def __init__(self, sender: object = None) -> None:
        self.sender = sender
        """The signals' ``sender``: the ``Scheduler`` or ``FrozenBeat`` that runs the round."""

    def __call__(self, events: Sequence[AuditEvent]) -> None:
        recorded(self.sender, events)


def recorded(sender: object, events: Sequence[AuditEvent]) -> None:
    """The hooks of ``events``, records just committed, as ``sender``; nothing at all is built
    while no receiver is connected, and nothing raises but ``BaseException`` (a stop request):
    the records are committed, so a hook never fails what wrote them."""
    if not (tick_enqueued.receivers or tick_skipped.receivers):
        return
    try:
        _announce(sender, events)
    except Exception as exc:
        log.error(
            "enqueue hooks not sent for these records: %s",
            cause(exc),
            exc_info=exc,
            extra=log_extra(Action.HOOK_FAILED),
        )


def _announce(sender: object, events: Sequence[AuditEvent]) -> None:
    """Send ``tick_enqueued`` / ``tick_skipped`` for each committed record of ``events``, in
    order, as ``sender``; never raises for a receiver's ``Exception``."""
    failing: _Failing = {}
    for event in events:
        if event.outcome is Outcome.ENQUEUED and event.task_id and tick_enqueued.receivers:
            _deliver(tick_enqueued, sender, _enqueued(event), failing)
        elif event.outcome is Outcome.SKIPPED and event.reason and tick_skipped.receivers:
            _deliver(tick_skipped, sender, _skipped(event), failing)
    for (signal, receiver), more in failing.items():
        if more:
            log.error(
                "%s receiver %s raised %d more time(s) in the same round",
                signal,
                receiver,
                more,
                extra=log_extra(Action.HOOK_FAILED, signal=signal, receiver=receiver, more=more),
            )


def _enqueued(event: AuditEvent) -> dict[str, Any]:
    return {
        "schedule": event.schedule,
        "tick": ms_to_datetime(event.tick_ms),
        "tick_ms": event.tick_ms,
        "task_id": event.task_id,
        "trigger": event.trigger.value,
    }


def _skipped(event: AuditEvent) -> dict[str, Any]:
    detail = event.detail
    last_ms = _int(detail, "last_ms", event.tick_ms)
    return {
        "schedule": event.schedule,
        "tick": ms_to_datetime(event.tick_ms),
        "tick_ms": event.tick_ms,
        "reason": event.reason,  # the stored word, a ``model.Reason`` value
        "trigger": event.trigger.value,
        "task_id": event.task_id,
        "count": _int(detail, "count", 1),
        "last_tick": ms_to_datetime(last_ms),
    }


def _int(detail: Mapping[str, Any], key: str, default: int) -> int:
    value = detail.get(key)
    return value if isinstance(value, int) else default


def _deliver(
    signal: TickSignal, sender: Any, named: Mapping[str, Any], failing: _Failing | None
) -> list[tuple[Any, Any]]:
    """Celery's ``Signal.send`` loop, with a raising receiver logged through ``log_extra``
    (once per round when ``failing`` counts the repeats). ``BaseException`` (SystemExit,
    KeyboardInterrupt) passes through, as in Celery: a stop request still stops beat."""
    responses: list[tuple[Any, Any]] = []
    if not signal.receivers:
        return responses
    for receiver in signal._live_receivers(sender):
        try:
            response = receiver(signal=signal, sender=sender, **named)
        except Exception as exc:
            _failed(signal.name, receiver, named, exc, failing)
            response = exc
        responses.append((receiver, response))
    return responses


def _failed(
    signal: str, receiver: Any, named: Mapping[str, Any], exc: Exception, failing: _Failing | None
) -> None:
    who = _receiver_name(receiver)
    if failing is not None and (signal, who) in failing:
        failing[signal, who] += 1
        return
    if failing is not None:
        failing[signal, who] = 0
    log.error(
        "%s receiver %s raised %s (schedule %s); the round goes on",
        signal,
        who,
        cause(exc),
        named.get("schedule"),
        exc_info=exc,
        extra=log_extra(
            Action.HOOK_FAILED,
            signal=signal,
            receiver=who,
            schedule=named.get("schedule"),
            task_id=named.get("task_id"),
        ),
    )


def _receiver_name(receiver: Any) -> str:
    """``module.qualname`` of a receiver, as a log line names it."""
    module = getattr(receiver, "__module__", None) or ""
    name = getattr(receiver, "__qualname__", None) or type(receiver).__qualname__
    return f"{module}.{name}" if module else str(name)
