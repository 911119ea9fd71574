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

A tick can also go out with no ``enqueued`` record: the round publishes first and records after
(SPEC §4), and a round that fails in between (fenced after its lease lapsed, the store gone, its
settle cut off by the idle timeout while the beat was starved or frozen) leaves a published tick
that runs while the audit knows nothing of it. The next round starts from the same schedule
position, but when it comes more than one interval later it fires a later tick rather than
replay that one (``missed: skip`` fires only the latest), so the newest *recorded* tick is an
older, finished one: two runs at once. The round tells the gate which ticks the broker confirmed
(``Gate`` rule 7); one confirmed without a record is kept here, by schedule, as an **unrecorded**
previous tick and judged like a recorded one (its run state from tracking, queued since the
round that published it), until it ends, is lost, or a tick at or after it is recorded. Kept in
this beat's memory; a beat started afterwards (or this one, once a worker has claimed the tick)
finds it through tracking instead: ``previous_tick`` answers with the newest tick a worker has
a run of when no record is as new (runs rule 7).

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
    """``begin(now_ms)``, ``gate(due, message) -> Reason | None``, then ``flush(safe,
    published)`` once the round settled (or failed).

    Ticks let through are remembered only for the ``DueSchedule`` object of the current round:
    the dispatcher hands every tick of one schedule over consecutively with the same object.
    Unrecorded ticks (module docstring) are kept across rounds, by schedule name.
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
        self._now_ms: int | None = None
        self._passed: dict[str, tuple[str, int]] = {}
        """Task id -> (schedule, tick) of every tick let through this round."""
        self._unrecorded: dict[str, _Unrecorded] = {}

    def begin(self, now_ms: int) -> None:
        """A round starts at ``now_ms`` (the store's clock)."""
        self._now_ms = now_ms

    def __call__(self, due: DueSchedule, message: TickMessage) -> Reason | None:
        policy = due.definition.overlap
        if policy is OverlapPolicy.ALLOW:
            return None
        if due is not self._due:
            self._due, self._let_through = due, None
        previous = self._previous(due, message)
        if previous and policy in (OverlapPolicy.SKIP, OverlapPolicy.BUFFER_ONE):
            log.debug(
                "%s not enqueued: %s has not finished",
                message.task_id,
                previous[0][0],
                extra=log_extra(Action.OVERLAP_SKIPPED, schedule=due.name, task_id=message.task_id),
            )
            return Reason.OVERLAP
        for task_id, tick_ms in previous:
            self._revokes.append(_Displaced(message.task_id, due.name, task_id, tick_ms))
        self._let_through = (message.task_id, message.tick_ms)
        self._passed[message.task_id] = (due.name, message.tick_ms)
        return None

    def _previous(self, due: DueSchedule, message: TickMessage) -> list[tuple[str, int]]:
        """(task id, tick) of each unfinished previous tick: none, or the newest recorded one
        and, newer than it, an unrecorded one."""
        if self._let_through is not None and self._let_through[1] < message.tick_ms:
            return [self._let_through]  # published moments ago in this round
        prev = self.tracking.previous_tick(due.name, message.tick_ms)
        found = []
        if prev is not None and unfinished(prev, self.queued_ttl_ms):
            found.append((prev.task_id, prev.tick_ms))
        unrecorded = self._unrecorded_before(due.name, message.tick_ms, prev)
        if unrecorded is not None:
            found.append(unrecorded)
        return found

    def _unrecorded_before(
        self, schedule: str, tick_ms: int, prev: PreviousTick | None
    ) -> tuple[str, int] | None:
        """The schedule's unrecorded tick before ``tick_ms`` while it is unfinished; forgotten
        once it is not, or once a tick at or after it is recorded (tracking knows better)."""
        kept = self._unrecorded.get(schedule)
        if kept is None or kept.tick_ms >= tick_ms:
            return None  # ``tick_ms`` itself: the round replays that very tick
        if prev is not None and prev.tick_ms >= kept.tick_ms:
            del self._unrecorded[schedule]
            return None
        run = self.tracking.get_run(kept.task_id)
        if prev is not None:
            now_ms = prev.now_ms  # the store's clock, read just now
        else:
            now_ms = self._now_ms if self._now_ms is not None else tick_ms
        as_previous = PreviousTick.of(kept.task_id, kept.tick_ms, kept.published_at_ms, run, now_ms)
        if not unfinished(as_previous, self.queued_ttl_ms):
            del self._unrecorded[schedule]
            return None
        return kept.task_id, kept.tick_ms

    def flush(self, safe: Collection[str], published: Collection[str] = ()) -> None:
        """Revoke the runs ``replace`` displaced this round for ticks now ``safe`` (recorded
        ``enqueued``); forget the others. Keep the ticks let through that were ``published``
        but are not ``safe`` as unrecorded (module docstring). Called once the round's audit
        write committed, or the round failed (nothing ``safe``)."""
        self._keep_unrecorded(safe, published)
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

    def _keep_unrecorded(self, safe: Collection[str], published: Collection[str]) -> None:
        passed, self._passed = self._passed, {}
        for task_id, (schedule, tick_ms) in sorted(passed.items(), key=lambda item: item[1][1]):
            kept = self._unrecorded.get(schedule)
            if task_id in safe:
                if kept is not None and kept.tick_ms <= tick_ms:
                    del self._unrecorded[schedule]  # the audit has a tick at or after it now
                continue
            if task_id not in published or (kept is not None and kept.tick_ms >= tick_ms):
                continue  # never reached the broker (or not known to have), or an older tick
            published_at = self._now_ms if self._now_ms is not None else tick_ms
            self._unrecorded[schedule] = _Unrecorded(task_id, tick_ms, published_at)
            log.info(
                "%s was published but the round failed before recording it; overlap counts it "
                "as the previous tick of %s until it ends",
                task_id,
                schedule,
                extra=log_extra(Action.TICK_UNRECORDED, schedule=schedule, task_id=task_id),
            )

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
class _Unrecorded:
    """A tick this beat published whose round failed before recording it ``enqueued``."""

    task_id: str
    tick_ms: int
    published_at_ms: int
    """The publishing round's now (the store's clock): queued since then."""


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
