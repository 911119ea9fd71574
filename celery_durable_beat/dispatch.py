"""One leader round: due → plan → publish → audit → advance (SPEC §4), through ports only.

The order is the guarantee. The due rows are read in a short transaction that commits before
anything is published (no transaction is open while the broker is slow, SPEC §3). A tick is
published first; its ``enqueued`` record and the schedule's advance are written next, in one
short transaction of their own (``RoundStore.settle``), fenced by the leader's epoch and with a
compare-and-set on the tick the schedule was read at. A crash anywhere replays at most the same
deterministic task id: before that commit the next round publishes it again (the same id, which
the worker guard absorbs); after it the schedule has moved on. Should an ``enqueued`` record
exist for a due tick anyway (a write that lost its compare-and-set), the round writes
``deduplicated`` and advances without publishing. A failing schedule never blocks the others; a
broker outage stops the round early (everything after would fail too) and never counts against
a schedule.

Beat's gates (``gates/``) are reached through one port, ``gates.base.Gate``: the round asks it
once what the workers reported of the due schedules' previous runs (``begin_round``, before any
publish), then before each publish whether the tick goes out (``before_publish``), and tells it
after ``settle`` committed which ticks are recorded ``enqueued`` (``after_settle``). So
``replace`` revokes (SPEC §6), side effects of a tick that is safe, are noted by the gate and
sent only then, for ticks recorded ``enqueued`` — never for one whose publish or confirm failed,
and none at all when the round fails. ``after_settle`` also names the ticks whose publish the
broker confirmed, on success and failure alike: one confirmed but never recorded (the round
failed after it) runs with no audit record to say so, and the next round may well fire a later
tick rather than replay it (more than one due, ``missed: skip``), so the gate keeps it as its
schedule's previous tick for ``overlap``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from celery_durable_beat import faults
from celery_durable_beat import round_records as records
from celery_durable_beat.gates.base import OPEN_GATE, Gate, PreviousRuns
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.logs import cause, log_extra
from celery_durable_beat.message import TickMessage, build_message
from celery_durable_beat.model import (
    EXPIRES_NEXT_TICK,
    OWN_FAULT_REASONS,
    Action,
    Outcome,
    OverlapPolicy,
    Reason,
    ScheduleState,
    StateReason,
)
from celery_durable_beat.policy import Plan, due_ms, plan_schedule
from celery_durable_beat.publish.base import Publisher, PublishSession
from celery_durable_beat.store.base import Advance, AuditEvent, DueSchedule, RoundStore

log = logging.getLogger("celery_durable_beat.dispatch")

CONFIRM_EVERY = 200
"""Most buffered publishes before the round confirms them with the broker."""
SENT_LINES_MAX = 100
"""Most ``Sending due task`` lines a round writes; a larger burst is one line (SPEC §4)."""


@dataclass
class RoundStats:
    """What one round (or the rounds of a burst, ``add``) did."""

    claimed: int = 0
    conflicts: int = 0
    broker_unavailable: bool = False
    events: list[AuditEvent] = field(default_factory=list)
    published: set[str] = field(default_factory=set)
    """Task ids whose publish the broker confirmed, recorded or not (``Gate`` rule 7)."""

    more_due: bool = False
    """The round claimed a full batch: more may be due right now."""

    def add(self, other: RoundStats) -> None:
        """Count ``other``, a later round of the same burst, in these figures."""
        self.claimed += other.claimed
        self.conflicts += other.conflicts
        self.broker_unavailable = self.broker_unavailable or other.broker_unavailable
        self.events.extend(other.events)
        self.published.update(other.published)
        self.more_due = other.more_due

    def outcomes(self) -> dict[str, int]:
        """Events of the round by outcome (for logs and metrics)."""
        counts = {outcome.value: 0 for outcome in Outcome}
        for event in self.events:
            counts[event.outcome.value] += 1
        return counts


@dataclass
class _Work:
    due: DueSchedule
    plan: Plan
    ticks: list[TickMessage]
    """The ``buffer_one`` tick first when one is held, then the plan's ticks to fire."""
    streak: int = 0
    """Own-fault failures in a row learnt from the workers (``gates/unknown_tasks.py``)."""
    failed_runs: bool = False
    """``pause_on_failure``: its last N runs failed, so it is paused instead of fired."""


@dataclass
class OpenRound:
    """One round from its claim to its settle: what ``Dispatcher.claim`` read and planned, then
    what ``Dispatcher.publish`` made of it for the store."""

    now_ms: int
    stats: RoundStats = field(default_factory=RoundStats)
    work: list[_Work] = field(default_factory=list)
    broken: list[DueSchedule] = field(default_factory=list)
    """Claimed schedules that could not be planned: quarantined by the round."""
    existing: set[str] = field(default_factory=set)
    """Task ids of the round's ticks that have an ``enqueued`` record already."""
    advances: list[Advance] = field(default_factory=list)

    def schedule_ids(self) -> frozenset[int]:
        """The rows this round claimed (the next round of a burst leaves them out)."""
        return frozenset([item.due.id for item in self.work] + [due.id for due in self.broken])


_Fire = Callable[[DueSchedule, TickMessage], tuple[Outcome, Reason | None]]
Recorded = Callable[[Sequence[AuditEvent]], None]
"""Told a round's records once its ``settle`` committed (``signals.RoundSignals``: the enqueue
hooks, SPEC §17); the round knows only this callable, never Celery."""


@dataclass
class _Result:
    """One schedule's records and advance in this round; ``failure`` stops its ticks."""

    item: _Work
    events: list[AuditEvent]
    advance: Advance
    failure: Reason | None


def tick_message(due: DueSchedule, tick_ms: int, upcoming_ms: int | None = None) -> TickMessage:
    """The message of an automatic tick, with placeholders filled from the tick; with
    ``expires: next_tick`` it expires when ``upcoming_ms`` (the schedule's next tick) is due."""
    expires_at = None
    if upcoming_ms is not None:
        expires_at = due_ms(due.name, due.definition, upcoming_ms)
    task_id = tick_task_id(due.name, tick_ms, due.namespace)
    return build_message(
        due.name,
        due.definition,
        tick_ms,
        task_id,
        next_due_ms=expires_at,
        namespace=due.namespace,
    )


class Dispatcher:
    """Runs rounds against a store and a publisher; holds no per-schedule state."""

    def __init__(
        self,
        store: RoundStore,
        publisher: Publisher,
        *,
        batch_size: int = 500,
        quarantine_after: int = 5,
        gate: Gate = OPEN_GATE,
        still_leader: Callable[[], bool] | None = None,
        recheck_ms: int = 1000,
        redeliver_after_ms: int | None = None,
        on_recorded: Recorded | None = None,
    ) -> None:
        self.store = store
        self.publisher = publisher
        self.batch_size = batch_size
        self.quarantine_after = quarantine_after
        # Beat's decisions around a publish (overlap, unknown tasks, failing streaks, live
        # queues); the round closes nothing of it, the beat loop does.
        self.gate = gate
        # Checked before each schedule: a leader whose lease may lapse stops publishing (SPEC §7);
        # also called before each publish, so a lease that ages mid-round is renewed.
        self.still_leader = still_leader
        # How soon a held ``buffer_one`` tick looks at its previous run again.
        self.recheck_ms = recheck_ms
        # Redelivery on (SPEC §6): each ``enqueued`` record is watched from this long after now.
        self.redeliver_after_ms = redeliver_after_ms
        # The enqueue hooks (SPEC §17), after the gate and the log lines of each round.
        self.on_recorded = on_recorded

    def run_round(self, now_ms: int, epoch: int) -> RoundStats:
        """Claim, publish, settle and finish one round (``burst.py`` runs a burst's rounds)."""
        rnd = OpenRound(now_ms)
        try:
            self.claim(rnd)
            if not rnd.stats.claimed:
                return rnd.stats
            self.publish(rnd)
            applied = self.store.settle(rnd.stats.events, rnd.advances, epoch)
        except BaseException:
            self.abandon(rnd)
            raise
        return self.finish(rnd, applied)

    def claim(self, rnd: OpenRound, excluding: Collection[int] = ()) -> None:
        """The round's due rows (but ``excluding``: store rule 12), each planned, and which of
        their ticks have an ``enqueued`` record already. Nothing is published yet."""
        with self.store.claim_due(rnd.now_ms, self.batch_size, excluding) as claim:
            rnd.stats.claimed = len(claim.schedules)
            rnd.stats.more_due = rnd.stats.claimed >= self.batch_size
            if not claim.schedules:
                return
            rnd.work, rnd.broken = _plan_all(claim.schedules, rnd.now_ms)
            ids = [t.task_id for w in rnd.work for t in w.ticks]
            rnd.existing = claim.enqueued_task_ids(ids) if ids else set()

    def publish(self, rnd: OpenRound) -> None:
        """Ask the gate about the round's schedules, publish their ticks, and make the records
        and advances the round's ``settle`` writes."""
        stats, now_ms = rnd.stats, rnd.now_ms
        _learn(rnd.work, self.gate.begin_round([item.due for item in rnd.work], now_ms))
        advances = self._publish_all(rnd.work, rnd.existing, now_ms, stats)
        advances += [_quarantine_unplannable(due, now_ms, stats) for due in rnd.broken]
        if self.redeliver_after_ms is not None:
            stats.events = _watched(stats.events, now_ms + self.redeliver_after_ms)
        rnd.advances = advances

    def abandon(self, rnd: OpenRound) -> None:
        """The round failed: what it displaced stays, nothing new is safe. What it published
        has no record, though it may run: the gate keeps it for overlap."""
        self.gate.after_settle((), rnd.stats.published)

    def finish(self, rnd: OpenRound, applied: Sequence[bool]) -> RoundStats:
        """After the round's ``settle`` committed: the gate's follow-up work, the log lines."""
        stats = rnd.stats
        faults.point("after_audit")
        # Let the gate revoke what ``replace`` displaced, for the ticks now recorded ``enqueued``
        # only (their publish confirmed, their record committed); the rest die.
        self.gate.after_settle(
            {e.task_id for e in stats.events if e.outcome is Outcome.ENQUEUED and e.task_id},
            stats.published,
        )
        _log_sent(stats.events, {item.due.name: item.due.definition.task for item in rnd.work})
        if self.on_recorded is not None:
            self.on_recorded(stats.events)
        stats.conflicts = applied.count(False)
        if stats.conflicts:
            log.info(
                "%d schedule(s) changed during the round; left as they are now",
                stats.conflicts,
                extra=log_extra(Action.ADVANCE_CONFLICT),
            )
        return stats

    def _publish_all(
        self, work: Sequence[_Work], existing: set[str], now_ms: int, stats: RoundStats
    ) -> list[Advance]:
        """Publish schedule by schedule; confirm buffered publishes every CONFIRM_EVERY."""
        done: list[_Result] = []
        pending: list[_Result] = []
        with self.publisher.session() as session:
            for item in work:
                if self.still_leader is not None and not self.still_leader():
                    break  # the rest stays due for whoever leads next
                result = self._run_one(item, self._firing(session, existing), now_ms)
                pending.append(result)
                stats.broker_unavailable = result.failure is Reason.BROKER_UNAVAILABLE
                if stats.broker_unavailable or session.unconfirmed() >= CONFIRM_EVERY:
                    done += self._confirm(session, pending, now_ms, stats)
                    pending = []
                if stats.broker_unavailable:
                    break
                faults.point("mid_batch")
            done += self._confirm(session, pending, now_ms, stats)
            faults.point("after_publish")
        for result in done:
            stats.events.extend(result.events)
        return [result.advance for result in done]

    def _confirm(
        self, session: PublishSession, pending: list[_Result], now_ms: int, stats: RoundStats
    ) -> list[_Result]:
        """Results whose publishes are confirmed; uncertain ones are re-run as failed."""
        if not pending:
            return pending
        if session.confirm() is None:
            stats.published.update(
                e.task_id
                for result in pending
                for e in result.events
                if e.outcome is Outcome.ENQUEUED and e.task_id
            )
            return pending
        stats.broker_unavailable = True
        return [self._as_uncertain(result, now_ms) for result in pending]

    def _as_uncertain(self, result: _Result, now_ms: int) -> _Result:
        """The same schedule's result had its first tentative publish failed on the broker."""
        enqueued = [e.tick_ms for e in result.events if e.outcome is Outcome.ENQUEUED]
        if not enqueued:
            return result
        recorded = {e.tick_ms: (e.outcome, records.reason_of(e.reason)) for e in result.events}

        def replay(_due: DueSchedule, message: TickMessage) -> tuple[Outcome, Reason | None]:
            if message.tick_ms >= enqueued[0]:
                return Outcome.FAILED, Reason.BROKER_UNAVAILABLE
            # A tick held for ``buffer_one`` has no record: the gate holds it again.
            return recorded.get(message.tick_ms, (Outcome.SKIPPED, Reason.OVERLAP))

        return self._run_one(result.item, replay, now_ms)

    def _firing(self, session: PublishSession, existing: set[str]) -> _Fire:
        def fire(due: DueSchedule, message: TickMessage) -> tuple[Outcome, Reason | None]:
            return self._fire(due, message, session, existing)

        return fire

    def _run_one(self, item: _Work, fire: _Fire, now_ms: int) -> _Result:
        if item.streak >= self.quarantine_after:
            return self._quarantine_unknown(item, now_ms)
        if item.failed_runs:
            return self._pause_failing(item, now_ms)
        due, own = item.due, []
        last_fired: int | None = None
        held = due.buffered_tick_ms
        buffering = due.definition.overlap is OverlapPolicy.BUFFER_ONE
        for index, message in enumerate(item.ticks):
            if index and self.still_leader is not None:
                # Renews a lease that ages while one schedule's many ticks go out (before its
                # first, ``_publish_all`` asked); what it says is acted on between schedules:
                # the ticks fired so far are this schedule's outcome, and an early stop would
                # leave it half advanced.
                self.still_leader()
            outcome, reason = fire(due, message)
            if buffering and reason is Reason.OVERLAP and held in (None, message.tick_ms):
                held = message.tick_ms  # waits, durably, for the previous run to end
                continue
            own.append(
                records.event(due, message.tick_ms, message.task_id, outcome, reason, now_ms)
            )
            if outcome is Outcome.FAILED:
                advance = self._after_failure(
                    item, message.tick_ms, reason, now_ms, last_fired, own, held
                )
                own.sort(key=records.by_tick)
                return _Result(item, own, advance, reason)
            if message.tick_ms == held:
                held = None  # the held tick has its outcome now
            last_fired = max(last_fired or message.tick_ms, message.tick_ms)
        plan = item.plan
        own.extend(records.dropped_events(due, plan.dropped, plan.next_tick_ms, now_ms))
        own.sort(key=records.by_tick)
        advance = records.advance_to(due, plan.next_tick_ms, last_fired, own, item.streak)
        return _Result(item, own, self._holding(advance, held, now_ms), None)

    def _holding(self, advance: Advance, held: int | None, now_ms: int) -> Advance:
        """The advance, keeping the ``buffer_one`` tick ``held``: the schedule is due again
        within ``recheck_ms`` to see whether the previous run has ended."""
        if held is None:
            return advance
        recheck = now_ms + self.recheck_ms
        due = recheck if advance.next_due_ms is None else min(advance.next_due_ms, recheck)
        return replace(advance, buffered_tick_ms=held, next_due_ms=due)

    def _pause_failing(self, item: _Work, now_ms: int) -> _Result:
        """``pause_on_failure``: the last N runs failed, so nothing more is fired until resume."""
        due = item.due
        log.warning(
            "schedule %s paused: its last %d runs failed",
            due.name,
            due.definition.pause_on_failure,
            extra=log_extra(Action.PAUSED_ON_FAILURE, schedule=due.name),
        )
        ticks = [message.tick_ms for message in item.ticks] or [records.position(due)]
        events = [
            records.event(due, tick, None, Outcome.SKIPPED, Reason.FAILURES, now_ms)
            for tick in ticks
        ]
        advance = records.stop(due, due.failures, ScheduleState.PAUSED, StateReason.FAILURES)
        return _Result(item, events, advance, None)

    def _quarantine_unknown(self, item: _Work, now_ms: int) -> _Result:
        """K ticks in a row no worker knew: quarantined instead of publishing again."""
        due = item.due
        log.error(
            "schedule %s quarantined: no worker knows its task (%d ticks in a row)",
            due.name,
            item.streak,
            extra=log_extra(Action.QUARANTINED, schedule=due.name),
        )
        events = list(records.stopped(due, Reason.QUARANTINED, now_ms))
        return _Result(item, events, records.quarantine(due, item.streak), Reason.UNKNOWN_TASK)

    def _fire(
        self, due: DueSchedule, message: TickMessage, session: PublishSession, existing: set[str]
    ) -> tuple[Outcome, Reason | None]:
        if message.task_id in existing:
            return Outcome.DEDUPLICATED, Reason.ALREADY_ENQUEUED
        held = self.gate.before_publish(due, message)
        if held is not None:
            return Outcome.SKIPPED, held
        reason = session.publish(message)
        if reason is None:
            return Outcome.ENQUEUED, None
        log.warning(
            "publish of %s failed: %s",
            message.task_id,
            reason.value,
            extra=log_extra(
                Action.PUBLISH_FAILED,
                schedule=due.name,
                task_id=message.task_id,
                reason=reason.value,
            ),
        )
        return Outcome.FAILED, reason

    def _after_failure(
        self,
        item: _Work,
        failed_tick: int,
        reason: Reason | None,
        now_ms: int,
        last_fired: int | None,
        events: list[AuditEvent],
        held: int | None,
    ) -> Advance:
        """Stay on the failed tick (dropped ticks before it are settled) and back off; a held
        ``buffer_one`` tick whose publish failed stays held, the schedule where it was."""
        due = item.due
        stay: int | None = failed_tick
        if failed_tick == held:
            stay = due.next_tick_ms
        events.extend(records.dropped_events(item.due, item.plan.dropped, stay, now_ms))
        own_fault = reason in OWN_FAULT_REASONS
        failures = due.failures + 1 if own_fault else due.failures
        state = ScheduleState.ACTIVE
        next_due: int | None = now_ms + records.backoff_ms(max(failures, 1))
        if own_fault and failures >= self.quarantine_after:
            state, next_due = ScheduleState.QUARANTINED, None
            events.append(
                records.event(due, failed_tick, None, Outcome.SKIPPED, Reason.QUARANTINED, now_ms)
            )
            log.error(
                "schedule %s quarantined after %d failures (%s)",
                due.name,
                failures,
                reason.value if reason else "",
                extra=log_extra(Action.QUARANTINED, schedule=due.name),
            )
        return Advance(
            schedule_id=due.id,
            expected_next_tick_ms=due.next_tick_ms,
            next_tick_ms=stay,
            next_due_ms=next_due,
            last_tick_ms=last_fired if last_fired is not None else due.last_tick_ms,
            last_outcome=Outcome.FAILED,
            failures=failures,
            state=state,
            buffered_tick_ms=held if state is ScheduleState.ACTIVE else None,
        )


def _log_sent(events: Sequence[AuditEvent], tasks: Mapping[str, str]) -> None:
    """Stock beat's INFO line for each tick now recorded ``enqueued`` (log-based monitoring
    greps for ``Sending due task <name>``), with the task id after it; a burst of more than
    ``SENT_LINES_MAX`` ticks is one line, so a catch-up cannot flood the log."""
    sent = [e for e in events if e.outcome is Outcome.ENQUEUED and e.task_id]
    if len(sent) > SENT_LINES_MAX:
        schedules = len({e.schedule for e in sent})
        log.info(
            "Scheduler: Sending due tasks: %d ticks of %d schedules",
            len(sent),
            schedules,
            extra=log_extra(Action.TICK_SENT, ticks=len(sent), schedules=schedules),
        )
        return
    for e in sent:
        task = tasks.get(e.schedule, "")
        log.info(
            "Scheduler: Sending due task %s (%s) %s",
            e.schedule,
            task,
            e.task_id,
            extra=log_extra(Action.TICK_SENT, schedule=e.schedule, task=task, task_id=e.task_id),
        )


def _watched(events: Sequence[AuditEvent], recheck_ms: int) -> list[AuditEvent]:
    """The round's records, each ``enqueued`` one watched for redelivery from ``recheck_ms``."""
    return [
        replace(e, recheck_ms=recheck_ms) if e.outcome is Outcome.ENQUEUED else e for e in events
    ]


def _learn(work: Sequence[_Work], previous: PreviousRuns) -> None:
    """What the workers reported: a previous tick no worker knew is one more own-fault failure
    in a row; a ``pause_on_failure`` schedule whose last N runs failed is paused this round."""
    for item in work:
        if item.due.id in previous.unknown_task:
            item.streak = item.due.failures + 1
        item.failed_runs = item.due.id in previous.failing


def _plan_all(
    schedules: Sequence[DueSchedule], now_ms: int
) -> tuple[list[_Work], list[DueSchedule]]:
    """Plan each schedule on its own: one that cannot be planned never stops the others."""
    work: list[_Work] = []
    broken: list[DueSchedule] = []
    for due in schedules:
        try:
            work.append(_plan_one(due, now_ms))
        except Exception as exc:
            log.error(
                "schedule %s quarantined: it cannot be planned (%s)",
                due.name,
                cause(exc),
                extra=log_extra(Action.QUARANTINED, schedule=due.name),
            )
            broken.append(due)
    return work, broken


def _quarantine_unplannable(due: DueSchedule, now_ms: int, stats: RoundStats) -> Advance:
    stats.events.extend(records.stopped(due, Reason.QUARANTINED, now_ms))
    return records.quarantine(due, due.failures)


def _plan_one(due: DueSchedule, now_ms: int) -> _Work:
    if due.next_tick_ms is None:  # only a held ``buffer_one`` tick is left
        result = Plan((), None)
    else:
        result = plan_schedule(due.name, due.definition, due.next_tick_ms, now_ms)
    ticks = list(result.fire)
    if due.buffered_tick_ms is not None:
        ticks.insert(0, due.buffered_tick_ms)
    upcoming = result.next_tick_ms if due.definition.expires == EXPIRES_NEXT_TICK else None
    return _Work(due, result, [tick_message(due, t, upcoming) for t in ticks])
