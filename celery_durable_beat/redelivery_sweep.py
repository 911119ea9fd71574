"""The leader's redelivery sweep (SPEC §6): a step of the beat loop, at most every few seconds.

``RedeliverySweep.maybe_sweep(now_ms, epoch, leads)`` does nothing until ``policy.sweep_ms`` has
passed since the last sweep; then:

1. one indexed read of the watched ticks whose recheck is due (``RoundStore`` rule 11), at most
   ``limit`` (the rest wait for the next sweep, which then comes at the next call instead of in
   ``sweep_ms``: a beat dispatching more ticks a second than a sweep every few seconds looks at
   still sees each in time): an idle sweep is that one probe;
2. on a Redis broker, one probe of the broker for their messages (``BrokerProbe``, one snapshot
   per queue), *then* the runs port for which of them a worker has claimed (any run state in
   tracking; with Redis claims, the claims and their markers of the rest, one ``MGET``: a claim
   whose worker died before its run state reached tracking has lapsed after ``run_ttl``, its
   marker lasts ``dedup_ttl``): read after the probe, so a tick claimed between the two is never
   taken for lost;
3. the pure decision for each (``redelivery.decide`` on the evidence of ``redelivery.py``);
4. the lost ones published again in one publish session, confirmed, with their own message and
   task id (``redelivery.redelivery_message``), each only while ``leads()`` still says this
   process holds the lease: the reads before may have taken long enough for it to lapse, and a
   deposed leader publishes nothing, as the dispatcher checks before each publish (one not sent
   is a lost tick still, tried again at the next sweep, by whoever leads then);
5. one fenced write (rule 11): a record per confirmed redelivery (outcome ``enqueued``, trigger
   ``redeliver``, detail ``{"redelivery": n}``) and every candidate's next recheck. A stale
   epoch raises ``StaleEpoch`` (the loop stands by); the publishes already made are the same
   task ids the guard absorbs.

Work per sweep follows the candidates, never the number of schedules. When the runs backend
does not answer, nothing is decided (no claim read, no evidence); when the probe does not,
no Redis tick is taken for lost. Either is logged once per outage.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from celery_durable_beat.exceptions import StoreError
from celery_durable_beat.logs import cause, log_extra
from celery_durable_beat.message import TickMessage
from celery_durable_beat.model import Action, Outcome, Trigger
from celery_durable_beat.publish.base import Publisher
from celery_durable_beat.redelivery import (
    AbsenceEvidence,
    Decision,
    FifoEvidence,
    Presence,
    QueueKey,
    RedeliveryPolicy,
    Verdict,
    decide,
    redelivery_message,
)
from celery_durable_beat.runs.base import Runs
from celery_durable_beat.store.base import AuditEvent, Recheck, RedeliveryCandidate, RoundStore

log = logging.getLogger("celery_durable_beat.redelivery")

SWEEP_LIMIT = 500
"""Most candidates one sweep looks at; the rest are next."""
_GIVEN_UP = {
    Verdict.EXHAUSTED: "lost again after durable_beat_redeliver_max redeliveries",
    Verdict.GONE: "its schedule was deleted or changed since",
    Verdict.FORGOTTEN: "unclaimed since its first publish, longer ago than durable_beat_dedup_ttl",
}
"""Why a watched tick is no longer sent again, as its log line says."""


class BrokerProbe(Protocol):
    """Where a tick's message is on the broker (``publish/redis_probe.py`` on Redis)."""

    def presence(self, wanted: Mapping[str, Sequence[str]]) -> dict[str, Presence]:
        """Queue name → task ids in, each task id's ``Presence`` out."""

    def close(self) -> None:
        """Release connections; idempotent."""


class RedeliverySweep:
    """The sweep (module docstring); holds the evidence gathered between sweeps."""

    def __init__(
        self,
        store: RoundStore,
        publisher: Publisher,
        runs: Runs,
        policy: RedeliveryPolicy,
        *,
        queue_of: Callable[[TickMessage], str | None],
        probe: BrokerProbe | None = None,
        limit: int = SWEEP_LIMIT,
        on_recorded: Callable[[Sequence[AuditEvent]], None] | None = None,
    ) -> None:
        self.store = store
        self.publisher = publisher
        self.runs = runs
        self.policy = policy
        self.queue_of = queue_of
        self.probe = probe
        self.limit = limit
        # The enqueue hooks (SPEC §17): told the redeliveries once their records are committed.
        self.on_recorded = on_recorded
        self.absence = AbsenceEvidence(policy.probe_apart_ms)
        self.fifo = FifoEvidence(policy.after_ms)
        self._next_ms: int | None = None
        self._warned: set[str] = set()

    def maybe_sweep(
        self, now_ms: int, epoch: int, leads: Callable[[], bool] = lambda: True
    ) -> list[AuditEvent]:
        """Sweep if it is time (module docstring); the redeliveries recorded. ``leads``: whether
        this process still holds the lease (asked before each publish)."""
        if self._next_ms is not None and now_ms < self._next_ms:
            return []
        self._next_ms = now_ms + self.policy.sweep_ms
        candidates = self.store.redelivery_candidates(now_ms, self.limit)
        if not candidates:
            return []
        if len(candidates) >= self.limit:
            # More are due: the next call sweeps again rather than in ``sweep_ms``, so the sweep
            # keeps up with any tick rate (a lost tick behind thousands of claimed ones, which
            # each sweep removes, is still found in seconds).
            self._next_ms = now_ms
        messages = {c.task_id: redelivery_message(c) for c in candidates}
        queues = {c.task_id: self._queue(messages[c.task_id]) for c in candidates}
        self._probe(candidates, queues, now_ms)
        claimed = self._claimed([c.task_id for c in candidates])
        if claimed is None:
            return []
        decisions = {
            c.task_id: decide(
                c,
                self.policy,
                now_ms,
                claimed=c.task_id in claimed,
                lost=self._lost(c, queues[c.task_id], now_ms),
                rebuildable=messages[c.task_id] is not None,
                suspect=self.absence.suspect(c.task_id),
            )
            for c in candidates
        }
        for c in candidates:
            if decisions[c.task_id].verdict is Verdict.CLAIMED and queues[c.task_id]:
                self.fifo.seen_claimed(_key(queues[c.task_id]), c.sent_ms, now_ms)
        sent = self._publish(candidates, decisions, messages, leads)
        events = [_event(c) for c in candidates if c.task_id in sent]
        rechecks = [self._recheck(c, decisions[c.task_id], c.task_id in sent, now_ms)
                    for c in candidates]  # fmt: skip
        self.store.settle_redeliveries(events, rechecks, epoch)
        self._log(candidates, decisions, sent)
        if events and self.on_recorded is not None:
            self.on_recorded(events)
        return events

    def _queue(self, message: TickMessage | None) -> tuple[str, object] | None:
        if message is None:
            return None
        queue = self.queue_of(message)
        return None if queue is None else (queue, message.options.get("priority"))

    def _probe(
        self,
        candidates: Sequence[RedeliveryCandidate],
        queues: Mapping[str, QueueKey | None],
        now_ms: int,
    ) -> None:
        """Ask the broker about the ticks old enough to be judged (Redis only)."""
        if self.probe is None:
            return
        wanted: dict[str, list[str]] = {}
        for c in candidates:
            queue = queues[c.task_id]
            if queue is not None and now_ms >= c.sent_ms + self.policy.after_ms:
                wanted.setdefault(queue[0], []).append(c.task_id)
        found = self.probe.presence(wanted)
        if any(p is Presence.UNKNOWN for p in found.values()):
            self._warn_once("probe", "the broker's queues could not be read for redelivery")
        else:
            self._warned.discard("probe")
        for task_id, presence in found.items():
            self.absence.observe(task_id, presence, now_ms)

    def _claimed(self, task_ids: Sequence[str]) -> set[str] | None:
        """Which ticks a worker has seen (any run state); None when the runs do not answer."""
        tracking, claims = self.runs.tracking, self.runs.claims
        errors: tuple[type[BaseException], ...] = (StoreError, *tracking.errors, *claims.errors)
        try:
            claimed = set(tracking.states(task_ids))
            if not self.runs.shared:
                claimed |= claims.ever_claimed([t for t in task_ids if t not in claimed])
        except errors as exc:
            self._warn_once("runs", f"run states not read for redelivery ({cause(exc)})")
            return None
        self._warned.discard("runs")
        return claimed

    def _lost(self, c: RedeliveryCandidate, queue: QueueKey | None, now_ms: int) -> bool:
        if self.probe is not None:
            return self.absence.lost(c.task_id, now_ms)
        return queue is not None and self.fifo.lost(queue, c.sent_ms, now_ms)

    def _publish(
        self,
        candidates: Sequence[RedeliveryCandidate],
        decisions: Mapping[str, Decision],
        messages: Mapping[str, TickMessage | None],
        leads: Callable[[], bool],
    ) -> set[str]:
        """Publish the lost ticks again while this process leads; the task ids the broker
        confirmed."""
        lost = [messages[c.task_id] for c in candidates
                if decisions[c.task_id].verdict is Verdict.LOST]  # fmt: skip
        out = [m for m in lost if m is not None]
        if not out:
            return set()
        accepted: list[str] = []
        with self.publisher.session() as session:
            for message in out:
                if not leads():
                    break
                if session.publish(message) is None:
                    accepted.append(message.task_id)
            if session.confirm() is not None:
                return set()
        return set(accepted)

    def _recheck(
        self, c: RedeliveryCandidate, decision: Decision, sent: bool, now_ms: int
    ) -> Recheck:
        if sent:
            self.absence.forget(c.task_id)
            return Recheck(c.record_id, decision.recheck_ms, now_ms, c.redeliveries + 1)
        recheck = decision.recheck_ms
        if decision.verdict is Verdict.LOST:  # its publish failed: try again next sweep
            recheck = now_ms + self.policy.sweep_ms
        if recheck is None:
            self.absence.forget(c.task_id)
        return Recheck(c.record_id, recheck, c.sent_ms, c.redeliveries)

    def _log(
        self,
        candidates: Sequence[RedeliveryCandidate],
        decisions: Mapping[str, Decision],
        sent: set[str],
    ) -> None:
        for c in candidates:
            verdict = decisions[c.task_id].verdict
            if c.task_id in sent:
                log.warning(
                    "tick %s of %s was lost by the broker; sent again (redelivery %d of %d)",
                    c.task_id,
                    c.schedule,
                    c.redeliveries + 1,
                    self.policy.max_count,
                    extra=log_extra(Action.REDELIVERED, schedule=c.schedule, task_id=c.task_id),
                )
            elif verdict in _GIVEN_UP:
                exhausted = verdict is Verdict.EXHAUSTED
                log.log(
                    logging.ERROR if exhausted else logging.INFO,
                    "tick %s of %s is not sent again (%s)",
                    c.task_id,
                    c.schedule,
                    _GIVEN_UP[verdict],
                    extra=log_extra(
                        Action.REDELIVERY_GAVE_UP, schedule=c.schedule, task_id=c.task_id
                    ),
                )

    def _warn_once(self, what: str, message: str) -> None:
        if what in self._warned:
            return
        self._warned.add(what)
        log.warning(
            "%s; no tick is redelivered on that evidence meanwhile",
            message,
            extra=log_extra(Action.REDELIVERY_PROBE_FAILED),
        )

    def close(self) -> None:
        """Close the probe (the runs belong to the round's gate, which closes them)."""
        if self.probe is not None:
            self.probe.close()


def _key(queue: QueueKey | None) -> QueueKey:
    assert queue is not None
    return queue


def _event(c: RedeliveryCandidate) -> AuditEvent:
    return AuditEvent(
        schedule=c.schedule,
        tick_ms=c.tick_ms,
        task_id=c.task_id,
        trigger=Trigger.REDELIVER,
        outcome=Outcome.ENQUEUED,
        version=c.version,
        detail={"redelivery": c.redeliveries + 1},
    )
