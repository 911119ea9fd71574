"""The overlap gate of the round (SPEC §6): ``skip`` and ``replace`` against the previous tick.

The round gate (``gates/round_gate.py``) asks it before each publish. ``allow`` schedules (the
default) return at once, with no query. For the others the gate looks at the schedule's previous
automatic tick — the newest ``enqueued`` one before this tick, with its run state (one indexed
query) — or at a tick it let through earlier in this same round (backfill fires several ticks in
one round, and their audit records are written only at the round's end).

The previous tick is **unfinished** unless its run state is ``succeeded``, ``failed`` or
``revoked``, and it is **lost** (treated as finished) when there has been no news of it for too
long: a run that started and stopped heartbeating for ``durable_beat_run_ttl`` (its worker died),
or a tick still queued, never started, ``durable_beat_queued_ttl`` after it was enqueued. So a
previous tick never blocks forever.

- ``skip``: an unfinished previous tick → this one is not published (audit ``skipped``, reason
  ``overlap``).
- ``buffer_one``: the gate answers as for ``skip``; the round holds the first such tick (no
  record yet, ``buffered_tick_ms`` on the row) and offers it to the gate again each recheck
  until the previous run has ended, then publishes it; further ticks meanwhile are ``skipped``.
- ``replace``: this tick is published, and once it is safe — its publish confirmed and its
  ``enqueued`` record committed, which the round tells ``flush`` after its audit write (through
  ``Gate.after_settle``) — the unfinished previous tick is revoked: ``revoked`` recorded for it if
  it has not started (so any worker refuses it later, even one that missed the broadcast), and
  ``app.control.revoke(task_id, terminate=True)`` for a run in progress (pools that can terminate:
  prefork, eventlet, gevent). A tick that did not reach the broker revokes nothing: with the
  broker down or a routing error, the running previous run is left to finish.

The gate sees only the runs port: it reads tracking, and records ``revoked`` in tracking and,
when the claims are kept apart (Redis), in the claims too.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from celery_durable_beat.exceptions import StoreError
from celery_durable_beat.logs import cause, log_extra
from celery_durable_beat.message import TickMessage
from celery_durable_beat.model import Action, OverlapPolicy, Reason, Trigger
from celery_durable_beat.runs.base import FINAL_RUN_STATES, PreviousTick, RunKey, Runs
from celery_durable_beat.settings import Settings
from celery_durable_beat.store.base import DueSchedule

log = logging.getLogger("celery_durable_beat.gates.overlap")

REVOKER = "beat"
"""The owner recorded on a run the gate revoked before it started."""


def unfinished(prev: PreviousTick, queued_ttl_ms: int) -> bool:
    """Whether the previous tick still blocks: not finished and not lost (module docstring)."""
    if prev.state in FINAL_RUN_STATES:
        return False
    if prev.state is None:
        return prev.now_ms <= prev.enqueued_at_ms + queued_ttl_ms
    return prev.expires_at_ms is not None and prev.now_ms <= prev.expires_at_ms


class OverlapGate:
    """``gate(due, message) -> Reason | None``, then ``flush(safe)`` once the round settled.

    Ticks let through are remembered only for the ``DueSchedule`` object of the current round:
    the dispatcher hands every tick of one schedule over consecutively with the same object.
    """

    def __init__(self, app: Any, settings: Settings, runs: Runs) -> None:
        self.app = app
        self.tracking = runs.tracking
        self.runs = runs
        self.queued_ttl_ms = round(settings.queued_ttl * 1000)
        self.keep_ms = round(settings.dedup_ttl * 1000)
        self._due: DueSchedule | None = None
        self._let_through: tuple[str, int] | None = None
        self._revokes: list[_Displaced] = []

    def __call__(self, due: DueSchedule, message: TickMessage) -> Reason | None:
        policy = due.definition.overlap
        if policy is OverlapPolicy.ALLOW:
            return None
        if due is not self._due:
            self._due, self._let_through = due, None
        previous = self._previous(due, message)
        if previous is not None and policy in (OverlapPolicy.SKIP, OverlapPolicy.BUFFER_ONE):
            log.debug(
                "%s not enqueued: %s has not finished",
                message.task_id,
                previous[0],
                extra=log_extra(Action.OVERLAP_SKIPPED, schedule=due.name, task_id=message.task_id),
            )
            return Reason.OVERLAP
        if previous is not None:
            self._revokes.append(_Displaced(message.task_id, due.name, *previous))
        self._let_through = (message.task_id, message.tick_ms)
        return None

    def _previous(self, due: DueSchedule, message: TickMessage) -> tuple[str, int] | None:
        """(task id, tick) of the unfinished previous tick, or None."""
        if self._let_through is not None and self._let_through[1] < message.tick_ms:
            return self._let_through  # published moments ago in this round
        prev = self.tracking.previous_tick(due.name, message.tick_ms)
        if prev is None or not unfinished(prev, self.queued_ttl_ms):
            return None
        return prev.task_id, prev.tick_ms

    def flush(self, safe: Collection[str]) -> None:
        """Revoke the runs ``replace`` displaced this round for ticks now ``safe`` (recorded
        ``enqueued``); forget the others. Called once the round's audit write committed."""
        revokes, self._revokes = self._revokes, []
        for item in revokes:
            if item.by not in safe:
                continue
            log.info(
                "%s replaces %s, which had not finished",
                item.by,
                item.task_id,
                extra=log_extra(
                    Action.OVERLAP_REPLACED,
                    schedule=item.schedule,
                    task_id=item.by,
                    replaced=item.task_id,
                ),
            )
            try:
                self._revoke(item.schedule, item.task_id, item.tick_ms)
            except self._tracking_errors() as exc:  # Gate rule 5: never raises
                _revoke_failed("could not mark %s revoked (%s)", item.task_id, exc)

    def _tracking_errors(self) -> tuple[type[BaseException], ...]:
        """What marking a run revoked may raise: the store's errors and the backend's own."""
        return (StoreError, *self.tracking.errors)

    def _revoke(self, schedule: str, task_id: str, tick_ms: int) -> None:
        key = RunKey(task_id, schedule, tick_ms, Trigger.AUTO.value)
        self.tracking.mark_revoked(key, REVOKER, self.keep_ms)
        claims = self.runs.claims
        if not self.runs.shared:
            try:
                claims.mark_revoked(key, REVOKER, self.keep_ms)
            except claims.errors as exc:
                _revoke_failed(f"could not mark %s revoked in {claims.where} (%s)", task_id, exc)
        try:
            self.app.control.revoke(task_id, terminate=True)
        except Exception as exc:  # the broker may be down; the publish will tell
            _revoke_failed("revoke of %s not broadcast (%s)", task_id, exc)


@dataclass(frozen=True)
class _Displaced:
    """A previous run ``replace`` displaces, and the new tick (``by``) that must be safe first."""

    by: str
    schedule: str
    task_id: str
    tick_ms: int


def _revoke_failed(text: str, task_id: str, exc: BaseException) -> None:
    """One warning per revoke step that failed; the next round decides again."""
    log.warning(
        text,
        task_id,
        cause(exc),
        extra=log_extra(Action.REVOKE_FAILED, task_id=task_id),
    )
