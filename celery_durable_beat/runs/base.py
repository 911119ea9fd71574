"""The runs port (SPEC §6): dedup claims and run tracking, one shape for every backend.

The worker guard claims a tick before its task runs and records how the run ends; the beat's
overlap gate reads the previous tick's run and revokes a displaced one. Two protocols:

- ``Claims``: who holds a tick's delivery, and in what state (the dedup guard). Backends:
  ``runs/sql.py`` (``SqlRunStore``, the tick's row of ``durable_beat_runs``), ``runs/redis.py``
  (``RedisClaims``, one key per task id) and ``runs/memory.py`` (``MemoryRuns``).
- ``RunTracking``: the durable run state per tick that history, the console and the overlap gate
  read. Backends: ``SqlRunStore`` and ``MemoryRuns``.

A backend implementing both keeps a claim *in* its tick's run row: when the composition root
(``runs/factory.py``) hands the same object as claims and tracking, the guard writes each state
once, through tracking. With Redis claims, tracking mirrors every claim write.

Contract (held by ``tests/integration/test_run_claims.py`` on every backend). Time is the
backend's clock (the store's, Redis's, the injected one); a claim or row *expires* when its
expiry instant is before that clock's now.

1. **Claim.** ``claim`` takes the tick, recording ``started`` for ``ttl_ms``, if it is absent,
   expired (a lost run, or a finished one past the dedup window), or ``retried`` while the
   delivery is that retry: ``attempt`` at least the attempt the ``retried`` write announced, and
   never attempt 0 (``SqlRunStore`` stores no attempt and takes any attempt > 0); or already
   ``started`` by the same owner (unique per delivery): a call repeated after its reply was
   lost (``pg_direct`` sends a statement again on a new connection) holds the claim instead of
   refusing its own run. Otherwise nothing changes and the state that refused it is returned.
   Of concurrent claims of one task id exactly one succeeds. The settles a claim is given are
   applied first, in order (rule 2).
2. **Settle / write.** A write follows ``WriteIf``: ``ALWAYS`` replaces; ``OWNER`` applies if the
   tick is absent or held by the write's owner; ``UNFINISHED`` applies only if the tick is
   present and not finished (``FINAL_RUN_STATES``); ``UNLESS_ENDED_OTHERWISE`` applies unless
   the tick is finished, not expired, in another state than the write's (so absent, expired,
   unfinished and same-state rows take it, and its owner); ``NOT_STARTED`` applies only if the
   tick is absent, expired or ``retried`` (rule 4's condition). An applied write holds the
   state for ``keep_ms`` from now. ``settle`` answers whether it applied.
3. **Heartbeat** pushes the expiry of ``started`` ticks still held by the given owner to now +
   ``ttl_ms``; ticks of other owners or in other states are left alone.
4. **Revoke.** ``mark_revoked`` records ``revoked`` only for a tick that has not started (absent,
   expired, or ``retried``) and answers whether it did; a later claim is refused with it.
5. **Release.** ``release`` gives a started tick back, if the owner still holds it: the next
   claim takes it at once (the message went back to the queue).
6. **State.** ``state`` is the state a claim of the tick would meet: None when absent or expired.
   ``ever_claimed`` names, of many task ids, those a claim was ever taken for, expired since or
   not (the store and memory: any row of the tick, kept until pruned; Redis: a marker each
   claim sets for ``dedup_ttl``, or the claim itself): the redelivery sweep's proof that a
   worker had the tick, which a claim lapsed with its dead worker no longer gives.
7. **Tracking.** ``get_run`` reads a tick's row (expired or not, until pruned);
   ``previous_tick`` finds the newest ``enqueued`` automatic tick of a schedule (names compare
   by ``ids.name_key``) before a given tick, with its run, unless a worker has a run row of a
   newer automatic tick of that schedule before the given tick: a tick that went out without
   its ``enqueued`` record (its round failed after the publish), which it finds instead, with
   that run; ``states`` reads the states of many
   task ids at once (expired or not; absent ids are left out); ``prune_runs`` deletes expired
   rows whose ``enqueued`` record is gone.
8. **Workers.** ``announce_worker`` upserts a worker's row (its queues, last seen = now);
   ``forget_worker`` deletes it; ``live_workers(ttl_ms)`` lists the workers last seen at or
   after now - ``ttl_ms``, ordered by hostname (``require_worker``, ``status``).
9. **Namespaces** (SPEC §16). A tick belongs to the namespace its task id names
   (``tick_namespace``: the id's ``<namespace>:`` prefix, none for the default), so a tick's
   claim, its writes (rules 1-5) and the claims' reads of it (rule 6) are that namespace's,
   whatever namespace the backend was built with: one worker pool serves several apps, and two
   namespaces' ticks of one schedule name and instant never refuse each other. A backend is
   built for one namespace (``namespace=None``: the default): tracking's reads (``get_run``,
   ``previous_tick``, ``states``, ``recent_states``), worker presence (rule 8) and the shared
   counters are that namespace's only, never another's rows. ``prune_runs`` alone deletes in
   every namespace: only workers prune, a pool may serve namespaces its own app is not in, and
   a row it deletes is one no namespace's history shows any more. The default namespace's keys
   and rows are exactly those of releases before namespaces (Redis ``durable_beat:run:<id>``,
   store rows with ``namespace = ''``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from celery_durable_beat.ids import NAMESPACE_PATTERN, id_namespace

_NAMESPACE = re.compile(NAMESPACE_PATTERN)


def tick_namespace(task_id: str) -> str | None:
    """The namespace a tick's runs live in (rule 9): its id's prefix when that is a namespace's
    name (``ids.id_namespace``), else None, the default. The id, not the ``periodic_namespace``
    header, decides: the id is what every claim of the tick dedups on, so every worker and every
    backend must find the tick in the same place whatever a message's headers say."""
    found = id_namespace(task_id)
    return found if found is not None and _NAMESPACE.fullmatch(found) else None


class RunState(str, Enum):
    """What the worker side knows of one tick's run (``run_state`` in history, SPEC §8)."""

    STARTED = "started"
    RETRIED = "retried"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REVOKED = "revoked"
    EXPIRED = "expired"
    """The tick's Celery ``expires`` passed before a worker started it: the worker discarded it
    (Celery's ``task_revoked`` with ``expired``), so it never runs."""
    UNKNOWN = "unknown"
    UNKNOWN_TASK = "unknown_task"
    """No worker that received the tick has its task (Celery's ``task_unknown``): recorded by
    the worker's main process, already expired (a later delivery to a worker that knows the
    task may still claim it); the round counts it as an own-fault failure (SPEC §4, §6)."""


FINAL_RUN_STATES = frozenset(
    {RunState.SUCCEEDED, RunState.FAILED, RunState.REVOKED, RunState.EXPIRED}
)
"""A run in one of these states is finished: it never blocks overlap and is never run again."""


def is_final(state: RunState | None) -> bool:
    """Whether a claim refused with ``state`` can never be taken again (within its window)."""
    return state in FINAL_RUN_STATES


class WriteIf(str, Enum):
    """When a run-state write replaces the state already stored for that tick (rule 2)."""

    ALWAYS = "always"
    OWNER = "owner"
    """Only if the row is absent or still held by the same owner (the run that writes)."""
    UNFINISHED = "unfinished"
    """Only if the row exists and is not finished (the worker's main process, which does not
    know the owner: lost pool processes)."""
    UNLESS_ENDED_OTHERWISE = "unless_ended_otherwise"
    """Unless the row is finished, not expired, in another state than the write's: absent,
    expired, unfinished and same-state rows take the write and its owner (the worker's main
    process recording a hard time limit: it may fire before the run claimed its tick, and the
    terminated pool process may record ``failed`` of its own first)."""
    NOT_STARTED = "not_started"
    """Only if the row is absent, expired or ``retried``: no run of the tick has started (rule 4's
    condition; the worker's main process recording a delivery it discarded before it ran, as
    expired or revoked, which must not end a run that another delivery has made or is making)."""


@dataclass(frozen=True)
class RunKey:
    """Which tick a run belongs to: its task id and where it came from."""

    task_id: str
    schedule: str
    tick_ms: int
    trigger: str
    namespace: str | None = field(init=False, repr=False, compare=False)
    """The namespace the tick's runs live in (rule 9), read from the task id once, when the key
    is made (not a ``cached_property``: on Python 3.11 its lock costs microseconds a tick): a key
    can never name another namespace than its id."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "namespace", tick_namespace(self.task_id))


@dataclass(frozen=True)
class RunWrite:
    """One run-state write; the state holds ``keep_ms`` after the backend's now.

    ``attempt`` is the delivery attempt the state is for: a ``retried`` write announces the
    attempt that may claim the tick next (rule 1).
    """

    key: RunKey
    state: RunState
    owner: str
    keep_ms: int
    write_if: WriteIf = WriteIf.OWNER
    attempt: int = 0


@dataclass(frozen=True)
class RunRecord:
    """A tick's run row as read back."""

    task_id: str
    schedule_key: str
    tick_ms: int
    trigger: str
    state: RunState
    owner: str | None
    updated_at_ms: int
    expires_at_ms: int | None
    namespace: str | None = None
    """The namespace the row is in (rule 9); None for the default."""


@dataclass(frozen=True)
class PreviousTick:
    """The newest automatic tick of a schedule enqueued (or run, rule 7) before a given one, and
    its run."""

    task_id: str
    tick_ms: int
    enqueued_at_ms: int
    state: RunState | None
    expires_at_ms: int | None
    now_ms: int

    @classmethod
    def of(
        cls, task_id: str, tick_ms: int, enqueued_at_ms: int, run: RunRecord | None, now_ms: int
    ) -> PreviousTick:
        """The tick with its run row, if it has one."""
        state = None if run is None else run.state
        expires = None if run is None else run.expires_at_ms
        return cls(task_id, tick_ms, enqueued_at_ms, state, expires, now_ms)


@dataclass(frozen=True)
class WorkerSeen:
    """A worker that ran ``install(app)``, as it last announced itself (rule 8)."""

    hostname: str
    queues: tuple[str, ...]
    """The names of the queues it consumes."""
    last_seen_ms: int
    """When it last announced itself, on the backend's clock."""


class Claims(Protocol):
    """The dedup claims of ticks (rules 1-6 of the module docstring)."""

    @property
    def where(self) -> str:
        """What the backend is, for log lines (``the dedup Redis``)."""

    @property
    def errors(self) -> tuple[type[BaseException], ...]:
        """What a call raises when the backend does not answer."""

    def claim(
        self, key: RunKey, owner: str, attempt: int, ttl_ms: int, settles: Sequence[RunWrite] = ()
    ) -> RunState | None:
        """None if this delivery now holds the tick; else the state that refused it (rule 1).
        ``settles`` are applied first, in order, as ``settle_many`` would (rule 2): the guard's
        deferred run ends travel with the next claim, one round trip for both."""

    def settle(self, write: RunWrite) -> bool:
        """Apply one state write (rule 2); True if it applied."""

    def settle_many(self, writes: Sequence[RunWrite]) -> None:
        """Apply state writes in order (rule 2), in one call where the backend can."""

    def heartbeat(self, held: Sequence[tuple[str, str]], ttl_ms: int) -> None:
        """Push on each (task id, owner) still ``started`` (rule 3)."""

    def mark_revoked(self, key: RunKey, owner: str, keep_ms: int) -> bool:
        """Record ``revoked`` for a tick that has not started (rule 4); True if recorded."""

    def release(self, task_id: str, owner: str) -> None:
        """Give the tick back if ``owner`` holds it (rule 5)."""

    def state(self, task_id: str) -> RunState | None:
        """The state a claim would meet; None if absent or expired (rule 6)."""

    def ever_claimed(self, task_ids: Sequence[str]) -> set[str]:
        """Those of ``task_ids`` a claim was ever taken for, expired or not (rule 6)."""

    def count(self, name: str) -> None:
        """Add one to a counter every worker of the namespace shares (rule 9; a no-op where
        claims live in the store)."""

    def counters(self) -> dict[str, int]:
        """The namespace's shared counters; empty where there are none."""

    def close(self) -> None:
        """Release connections; idempotent."""


class RunTracking(Protocol):
    """Run state per tick, durable, read by history and the overlap gate (rules 2-4, 7); the
    reads and worker presence of the namespace it was built with (rule 9)."""

    @property
    def where(self) -> str:
        """What the backend is, for log lines (``the durable beat store``)."""

    @property
    def errors(self) -> tuple[type[BaseException], ...]:
        """What a call raises when the backend does not answer."""

    def write(self, writes: Sequence[RunWrite]) -> None:
        """Apply run-state writes (rule 2), in order, in one transaction."""

    def heartbeat(self, held: Sequence[tuple[str, str]], ttl_ms: int) -> None:
        """Push on each (task id, owner) still ``started`` (rule 3)."""

    def mark_revoked(self, key: RunKey, owner: str, keep_ms: int) -> bool:
        """Record ``revoked`` for a tick that has not started (rule 4); True if recorded."""

    def get_run(self, task_id: str) -> RunRecord | None:
        """The run row of a task id (rule 7)."""

    def previous_tick(self, schedule: str, before_tick_ms: int) -> PreviousTick | None:
        """The newest automatic tick of ``schedule`` before ``before_tick_ms`` recorded
        ``enqueued``, or run without that record (rule 7)."""

    def states(self, task_ids: Sequence[str]) -> dict[str, RunState]:
        """The stored state of each task id that has a row, expired or not (rule 7)."""

    def recent_states(self, schedule: str, since_tick_ms: int | None, limit: int) -> list[RunState]:
        """The run states of the ``limit`` newest automatic ticks of ``schedule`` at or after
        ``since_tick_ms`` (all when None), newest tick first (``pause_on_failure``)."""

    def prune_runs(self, limit: int) -> int:
        """Delete up to ``limit`` expired rows whose ``enqueued`` record is gone (rule 7), in
        every namespace (rule 9)."""

    def announce_worker(self, hostname: str, queues: Sequence[str]) -> None:
        """Record that ``hostname`` is alive now and consumes ``queues`` (rule 8)."""

    def forget_worker(self, hostname: str) -> None:
        """Drop ``hostname``'s row: it shut down (rule 8)."""

    def live_workers(self, ttl_ms: int) -> list[WorkerSeen]:
        """The workers seen within ``ttl_ms`` of now, ordered by hostname (rule 8)."""

    def close(self) -> None:
        """Release connections; idempotent."""


@dataclass(frozen=True)
class Runs:
    """The claims and the tracking a process uses, as the composition root picked them."""

    claims: Claims
    tracking: RunTracking

    @property
    def shared(self) -> bool:
        """True when the claims are the tracking rows (one backend): each state is written
        once, through tracking, and an outage of one is an outage of both."""
        return self.claims is self.tracking  # type: ignore[comparison-overlap]

    def close(self) -> None:
        """Close both (once when shared)."""
        self.tracking.close()
        if not self.shared:
            self.claims.close()
