"""Lost ticks, sent again (SPEC §6): which watched ticks the broker lost, decided from values.

A tick recorded ``enqueued`` can still be lost by the broker: a worker SIGKILLed between kombu's
Redis ``BRPOP`` and its ``unacked`` record, a Redis broker restarted without persistence, a
purged queue. With ``durable_beat_redeliver_after`` set, every ``enqueued`` record of the round
is watched (store rule 11) and the leader's sweep (``redelivery_sweep.py``) asks, for each tick
still unclaimed ``after`` its last publish, whether there is **evidence of loss**. Waiting in a
backlog or in a worker's prefetch is never evidence: a backlog is never multiplied.

The evidence, per broker:

- **Redis** (a probe of the broker, ``publish/redis_probe.py``): the message is in none of the
  queue's lists (kombu's priority lists included) and not in kombu's ``unacked`` hash, on two
  probes at least ``probe_apart_ms`` apart with no sighting between them, and the tick is still
  unclaimed after the second (``AbsenceEvidence``). Why this cannot fire on a backlog: a waiting
  message is in a list; a prefetched one (a starting worker's, a busy worker's reserve) is in
  ``unacked`` until it is acknowledged, and kombu restores it to the list itself after the
  visibility timeout; the only instant a message that is not lost is in neither is kombu's own
  two-step window (``BRPOP`` then the ``unacked`` write, microseconds) or the moment between an
  early acknowledgement and the guard's claim (milliseconds) — two absent probes seconds apart,
  then a claim read after them, rule both out. A merely empty queue is not evidence: the probe
  looks for this tick's task id, and a probe that cannot answer (the broker down, a list too
  long to scan) is no evidence either.
- **Any other broker** (RabbitMQ, which loses messages only to a purge or a deleted queue): a
  tick published later to the same queue (and priority) was seen claimed at least ``after_ms``
  ago (``FifoEvidence``). A queue is FIFO: a later message consumed long ago means this one is
  not waiting in line. Why this cannot fire on a backlog: while ticks queue with no consumer,
  nothing later is claimed. Its limit: a message held unacknowledged in one worker's prefetch
  while another worker consumed later ones for longer than ``after_ms`` looks lost; the copy
  is then harmless (the guard runs the tick once), and ``after_ms`` longer than the longest task
  avoids it.

Then the rules of one candidate (``decide``): claimed (any run state: a worker saw it) →
never watched again; its schedule deleted or changed since (another version is another
message) or its ``expires`` passed, or it was first published longer ago than the dedup TTL
(``horizon_ms``: the guard may have forgotten a run of it) → never again; lost → sent again (at
most ``max_count`` times after the first publish, each ``after_ms`` from the last) or, past
that, given up; no evidence yet → looked at again in ``sweep_ms`` if the evidence is half there
(a Redis message absent once), else after half the time it has waited (within ``sweep_ms`` and
ten times ``after_ms``): a backlog with no consumer is looked at less and less often. A
redelivery is the tick's own message (same task id, args, headers); its ``expires`` becomes the
absolute instant the first publish set, so a second copy never outlives the first.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum

from celery_durable_beat.ids import id_namespace
from celery_durable_beat.message import TickMessage, build_message
from celery_durable_beat.model import EXPIRES_NEXT_TICK
from celery_durable_beat.policy import due_ms, ticks_after
from celery_durable_beat.store.values import RedeliveryCandidate

SWEEP_MOST_MS = 5_000
"""Longest time between two sweeps: a lost tick waits at most this beyond its evidence."""
SWEEP_LEAST_MS = 1_000
"""Shortest time between two sweeps: an idle round pays one indexed query at most this often."""
WAIT_MOST = 10
"""A tick with no evidence is looked at again at most ``WAIT_MOST`` x ``after_ms`` later."""
DEFAULT_HORIZON_MS = 86_400_000
"""``durable_beat_dedup_ttl``'s default."""
PROBE_APART_MS = 2_000
"""Least time between the two absent probes that make a Redis message lost: far beyond kombu's
BRPOP→unacked window and an early ack before the guard's claim."""


@dataclass(frozen=True)
class RedeliveryPolicy:
    """``durable_beat_redeliver_after`` (ms), ``durable_beat_redeliver_max`` and
    ``durable_beat_dedup_ttl`` (ms, ``horizon_ms``)."""

    after_ms: int
    max_count: int
    probe_apart_ms: int = PROBE_APART_MS
    horizon_ms: int = DEFAULT_HORIZON_MS
    """How long after its first publish a tick is watched: the guard remembers a claim (and a
    finished run) for the dedup TTL, so a copy sent later could run a tick twice."""

    @property
    def sweep_ms(self) -> int:
        """How often the sweep runs: half the delay, within 1 to 5 seconds."""
        return max(SWEEP_LEAST_MS, min(SWEEP_MOST_MS, self.after_ms // 2))

    def wait_ms(self, waited_ms: int) -> int:
        """When to look again at a tick with no evidence that has waited ``waited_ms`` since
        its last publish: half that, within ``sweep_ms`` and ``WAIT_MOST`` x ``after_ms``, so a
        long backlog is looked at less and less often instead of at every sweep."""
        return max(self.sweep_ms, min(WAIT_MOST * self.after_ms, waited_ms // 2))


class Verdict(str, Enum):
    """What the sweep does with one candidate."""

    CLAIMED = "claimed"
    """A worker has it (any run state): never watched again."""
    GONE = "gone"
    """Its schedule was deleted or changed since: the tick's message cannot be rebuilt."""
    EXPIRED = "expired"
    """Its ``expires`` has passed: a copy would be discarded, so none is sent."""
    LOST = "lost"
    """Evidence of loss: sent again now."""
    EXHAUSTED = "exhausted"
    """Lost again after ``max_count`` redeliveries: given up."""
    FORGOTTEN = "forgotten"
    """First published longer ago than ``horizon_ms``: the guard may no longer remember a run
    of it, so no copy is sent (and its record may be pruned)."""
    WAIT = "wait"
    """No evidence yet: looked at again later."""


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    recheck_ms: int | None
    """When to look again; None: never."""


class Presence(str, Enum):
    """What one probe of the broker found for a tick's message."""

    PRESENT = "present"
    ABSENT = "absent"
    UNKNOWN = "unknown"
    """The probe could not answer (broker down, list too long): no evidence either way."""


def expires_at_ms(candidate: RedeliveryCandidate) -> int | None:
    """The instant the tick's first publish made it expire (None: never): seconds counted
    from its ``enqueued`` record, or ``next_tick``'s due instant of the occurrence after it (the
    earliest its first message could have carried, so a copy never outlives it)."""
    definition = candidate.definition
    if definition is None or definition.expires is None:
        return None
    if definition.expires == EXPIRES_NEXT_TICK:
        upcoming = ticks_after(definition, candidate.tick_ms, 1)
        return due_ms(candidate.schedule, definition, upcoming[0]) if upcoming else None
    return candidate.recorded_at_ms + round(float(definition.expires) * 1000)


def redelivery_message(candidate: RedeliveryCandidate) -> TickMessage | None:
    """The tick's own message again (same id, arguments, headers), its expiry the absolute
    instant of the first publish's; None when the schedule is gone or changed."""
    definition = candidate.definition
    if definition is None or candidate.schedule_version != candidate.version:
        return None
    message = build_message(
        candidate.schedule,
        definition,
        candidate.tick_ms,
        candidate.task_id,
        namespace=id_namespace(candidate.task_id),
    )
    deadline = expires_at_ms(candidate)
    if deadline is None:
        return message
    options = dict(message.options)
    options["expires"] = datetime.fromtimestamp(deadline / 1000, timezone.utc)
    return TickMessage(**{**message.__dict__, "options": options})


def decide(
    candidate: RedeliveryCandidate,
    policy: RedeliveryPolicy,
    now_ms: int,
    *,
    claimed: bool,
    lost: bool,
    rebuildable: bool,
    suspect: bool = False,
) -> Decision:
    """One candidate's fate (module docstring), from values only. ``suspect``: the evidence is
    half there (a Redis message absent once): looked at again at the next sweep."""
    final = _settled(candidate, now_ms, claimed=claimed, rebuildable=rebuildable)
    if final is not None:
        return Decision(final, None)
    if now_ms >= candidate.recorded_at_ms + policy.horizon_ms:
        return Decision(Verdict.FORGOTTEN, None)
    if now_ms < candidate.sent_ms + policy.after_ms:
        return Decision(Verdict.WAIT, candidate.sent_ms + policy.after_ms)
    if not lost:
        waited = policy.sweep_ms if suspect else policy.wait_ms(now_ms - candidate.sent_ms)
        return Decision(Verdict.WAIT, now_ms + waited)
    if candidate.redeliveries >= policy.max_count:
        return Decision(Verdict.EXHAUSTED, None)
    return Decision(Verdict.LOST, now_ms + policy.after_ms)


def _settled(
    candidate: RedeliveryCandidate, now_ms: int, *, claimed: bool, rebuildable: bool
) -> Verdict | None:
    """Why the tick is never looked at again whatever the evidence, if it is not."""
    if claimed:
        return Verdict.CLAIMED
    if not rebuildable:
        return Verdict.GONE
    deadline = expires_at_ms(candidate)
    if deadline is not None and now_ms >= deadline:
        return Verdict.EXPIRED
    return None


class AbsenceEvidence:
    """Redis: a tick's message absent from the broker on probes ``apart_ms`` apart."""

    def __init__(self, apart_ms: int) -> None:
        self.apart_ms = apart_ms
        self._absent_since: dict[str, int] = {}

    def observe(self, task_id: str, presence: Presence, now_ms: int) -> None:
        if presence is Presence.ABSENT:
            self._absent_since.setdefault(task_id, now_ms)
        else:  # seen, or not known: the count of absent probes starts again
            self._absent_since.pop(task_id, None)

    def lost(self, task_id: str, now_ms: int) -> bool:
        since = self._absent_since.get(task_id)
        return since is not None and now_ms - since >= self.apart_ms

    def suspect(self, task_id: str) -> bool:
        """Absent on a probe, not yet on two apart."""
        return task_id in self._absent_since

    def forget(self, task_id: str) -> None:
        """The tick is sent again or no longer watched: a new copy needs new evidence."""
        self._absent_since.pop(task_id, None)


QueueKey = tuple[str, object]
"""A queue and a message priority: FIFO holds within one such pair."""


class FifoEvidence:
    """Any broker: a tick published later to the same queue seen claimed ``after_ms`` ago.

    Memory stays bounded: per queue, the claims seen within the last ``after_ms`` and one
    number (the latest publish instant among the claims seen before that).
    """

    def __init__(self, after_ms: int) -> None:
        self.after_ms = after_ms
        self._recent: dict[QueueKey, deque[tuple[int, int]]] = {}
        self._settled: dict[QueueKey, int] = {}

    def seen_claimed(self, queue: QueueKey, sent_ms: int, now_ms: int) -> None:
        """A tick of ``queue`` last published at ``sent_ms`` is claimed, seen at ``now_ms``."""
        self._recent.setdefault(queue, deque()).append((now_ms, sent_ms))

    def lost(self, queue: QueueKey, sent_ms: int, now_ms: int) -> bool:
        """Whether a tick of ``queue`` published after ``sent_ms`` was seen claimed at least
        ``after_ms`` before ``now_ms``."""
        recent = self._recent.get(queue)
        while recent and recent[0][0] <= now_ms - self.after_ms:
            _, sent = recent.popleft()
            self._settled[queue] = max(self._settled.get(queue, sent), sent)
        return self._settled.get(queue, sent_ms) > sent_ms
