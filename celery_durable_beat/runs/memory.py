"""``MemoryRuns``: the runs port (``Claims`` and ``RunTracking``) in one process's memory.

For tests: the worker guard and the overlap gate run on it without SQL or Redis, in
milliseconds, and it is held to the same contract tests as the real backends
(``tests/integration/test_run_claims.py``). Time is an injected ``Clock``, so expiry is
deterministic. It keeps a claim in its tick's row, like the store; two instances, one handed
as claims and one as tracking, behave like Redis claims mirrored into the store.

Retries: the row keeps the attempt a ``retried`` write announced, and only a delivery with at
least that attempt (and never attempt 0) takes it, as Redis does; the store, which stores no
attempt, is looser for attempts between 1 and that one (rule 1 of ``base.py``).

The audit is not here: ``enqueued`` records what ``previous_tick`` and ``prune_runs`` would read
from the store's ``enqueued`` records.

Namespaces (rule 9 of ``base.py``): an instance is of one namespace (``namespace=None``: the
default), and ``in_namespace`` gives another namespace's view of the same rows, as two apps with
different ``durable_beat_namespace`` see one store. A row is its tick's namespace's (read from
its id), whichever view wrote it; tracking's reads, worker presence and the counters are the
view's.
"""

from __future__ import annotations

import copy
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from celery_durable_beat.clock import Clock, SystemClock
from celery_durable_beat.exceptions import StoreError
from celery_durable_beat.ids import name_key
from celery_durable_beat.runs.base import (
    FINAL_RUN_STATES,
    PreviousTick,
    RunKey,
    RunRecord,
    RunState,
    RunWrite,
    WorkerSeen,
    WriteIf,
)

if TYPE_CHECKING:
    from celery_durable_beat.runs.base import Claims, RunTracking


@dataclass(frozen=True)
class _Enqueued:
    namespace: str | None
    schedule_key: str
    tick_ms: int
    task_id: str
    at_ms: int


@dataclass
class _Tables:
    """What every namespace's view of one ``MemoryRuns`` shares, as one store's tables."""

    rows: dict[str, RunRecord] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    enqueued: list[_Enqueued] = field(default_factory=list)
    counters: Counter[tuple[str | None, str]] = field(default_factory=Counter)
    workers: dict[tuple[str | None, str], WorkerSeen] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class MemoryRuns:
    """Claims and run rows in a dict, behind one lock (so concurrent claims race fairly)."""

    where = "the in-memory runs"
    errors: tuple[type[BaseException], ...] = (StoreError,)

    def __init__(self, clock: Clock | None = None, *, namespace: str | None = None) -> None:
        """``namespace``: the one tracking reads, presence and counters are of (rule 9)."""
        self.clock: Clock = clock or SystemClock()
        self.namespace = namespace
        self._t = _Tables()
        self._rows = self._t.rows
        self._attempts = self._t.attempts
        self._lock = self._t.lock

    def in_namespace(self, namespace: str | None) -> MemoryRuns:
        """The same rows, as a backend built for ``namespace`` sees them (module docstring)."""
        view = copy.copy(self)
        view.namespace = namespace
        return view

    # -- what the audit would hold ------------------------------------------------------------
    def enqueued(self, schedule: str, tick_ms: int, task_id: str, at_ms: int | None = None) -> None:
        """Record an ``enqueued`` automatic tick in this namespace, as the round's audit write
        would."""
        at = self.clock.now_ms() if at_ms is None else at_ms
        record = _Enqueued(self.namespace, name_key(schedule), tick_ms, task_id, at)
        with self._lock:
            self._t.enqueued.append(record)

    def forget_enqueued(self, task_id: str) -> None:
        """Drop the ``enqueued`` record of a task id, as history pruning does."""
        with self._lock:
            self._t.enqueued[:] = [e for e in self._t.enqueued if e.task_id != task_id]

    # -- claims ---------------------------------------------------------------------------------
    def _live(self, task_id: str, now: int) -> RunRecord | None:
        row = self._rows.get(task_id)
        if row is None or (row.expires_at_ms is not None and row.expires_at_ms < now):
            return None
        return row

    def claim(
        self, key: RunKey, owner: str, attempt: int, ttl_ms: int, settles: Sequence[RunWrite] = ()
    ) -> RunState | None:
        with self._lock:
            now = self.clock.now_ms()
            for write in settles:
                self._apply(write, now)
            row = self._live(key.task_id, now)
            retry = attempt >= max(1, self._attempts.get(key.task_id, 0))
            mine = row is not None and row.state is RunState.STARTED and row.owner == owner
            if row is not None and not (row.state is RunState.RETRIED and retry) and not mine:
                return row.state
            self._put(RunWrite(key, RunState.STARTED, owner, ttl_ms, attempt=attempt), now)
            return None

    def settle(self, write: RunWrite) -> bool:
        with self._lock:
            return self._apply(write, self.clock.now_ms())

    def settle_many(self, writes: Sequence[RunWrite]) -> None:
        self.write(writes)

    def write(self, writes: Sequence[RunWrite]) -> None:
        with self._lock:
            now = self.clock.now_ms()
            for item in writes:
                self._apply(item, now)

    def _apply(self, item: RunWrite, now: int) -> bool:
        row = self._rows.get(item.key.task_id)
        if item.write_if is WriteIf.UNFINISHED:
            if row is None or row.state in FINAL_RUN_STATES:
                return False
            item = replace(item, owner=row.owner or "")
        elif item.write_if is WriteIf.OWNER and row is not None and row.owner != item.owner:
            return False
        elif item.write_if is WriteIf.UNLESS_ENDED_OTHERWISE:
            live = self._live(item.key.task_id, now)
            if live is not None and live.state in FINAL_RUN_STATES and live.state != item.state:
                return False
        elif item.write_if is WriteIf.NOT_STARTED:
            live = self._live(item.key.task_id, now)
            if live is not None and live.state is not RunState.RETRIED:
                return False
        self._put(item, now)
        return True

    def _put(self, item: RunWrite, now: int) -> None:
        """Write a row; an existing one keeps where it came from (as the store's upsert)."""
        old = self._rows.get(item.key.task_id)
        self._rows[item.key.task_id] = RunRecord(
            task_id=item.key.task_id,
            schedule_key=old.schedule_key if old else name_key(item.key.schedule),
            tick_ms=old.tick_ms if old else item.key.tick_ms,
            trigger=old.trigger if old else item.key.trigger,
            state=item.state,
            owner=item.owner,
            updated_at_ms=now,
            expires_at_ms=now + item.keep_ms,
            namespace=item.key.namespace,
        )
        self._attempts[item.key.task_id] = item.attempt

    def heartbeat(self, held: Sequence[tuple[str, str]], ttl_ms: int) -> None:
        with self._lock:
            now = self.clock.now_ms()
            for task_id, owner in held:
                row = self._rows.get(task_id)
                if row is not None and row.owner == owner and row.state is RunState.STARTED:
                    self._rows[task_id] = replace(
                        row, updated_at_ms=now, expires_at_ms=now + ttl_ms
                    )

    def mark_revoked(self, key: RunKey, owner: str, keep_ms: int) -> bool:
        with self._lock:
            now = self.clock.now_ms()
            row = self._live(key.task_id, now)
            if row is not None and row.state is not RunState.RETRIED:
                return False
            self._put(RunWrite(key, RunState.REVOKED, owner, keep_ms), now)
            return True

    def release(self, task_id: str, owner: str) -> None:
        with self._lock:
            row = self._rows.get(task_id)
            if row is not None and row.owner == owner:
                now = self.clock.now_ms()
                self._rows[task_id] = replace(
                    row, state=RunState.UNKNOWN, updated_at_ms=now, expires_at_ms=now - 1
                )

    def state(self, task_id: str) -> RunState | None:
        with self._lock:
            row = self._live(task_id, self.clock.now_ms())
        return None if row is None else row.state

    def ever_claimed(self, task_ids: Sequence[str]) -> set[str]:
        """A claim is its tick's row, kept expired until pruned: any row."""
        with self._lock:
            return {t for t in task_ids if t in self._rows}

    def count(self, name: str) -> None:
        with self._lock:
            self._t.counters[self.namespace, name] += 1

    def counters(self) -> dict[str, int]:
        with self._lock:
            items = list(self._t.counters.items())
        return {name: n for (namespace, name), n in items if namespace == self.namespace}

    # -- tracking -------------------------------------------------------------------------------
    def _mine(self, row: RunRecord | None) -> RunRecord | None:
        """``row`` if it is in this view's namespace (rule 9)."""
        return row if row is not None and row.namespace == self.namespace else None

    def get_run(self, task_id: str) -> RunRecord | None:
        with self._lock:
            return self._mine(self._rows.get(task_id))

    def previous_tick(self, schedule: str, before_tick_ms: int) -> PreviousTick | None:
        wanted, namespace = name_key(schedule), self.namespace
        with self._lock:
            now = self.clock.now_ms()
            record = next(
                (
                    rec
                    for rec in reversed(self._t.enqueued)
                    if rec.namespace == namespace
                    and rec.schedule_key == wanted
                    and rec.tick_ms < before_tick_ms
                ),
                None,
            )
            run = max(
                (
                    row
                    for row in self._rows.values()
                    if row.namespace == namespace
                    and row.schedule_key == wanted
                    and row.trigger == "auto"
                    and row.tick_ms < before_tick_ms
                ),
                key=lambda row: row.tick_ms,
                default=None,
            )
            if run is not None and (record is None or run.tick_ms > record.tick_ms):
                return PreviousTick.of(run.task_id, run.tick_ms, run.updated_at_ms, run, now)
            if record is not None:
                row = self._rows.get(record.task_id)
                return PreviousTick.of(record.task_id, record.tick_ms, record.at_ms, row, now)
        return None

    def recent_states(self, schedule: str, since_tick_ms: int | None, limit: int) -> list[RunState]:
        wanted, floor = name_key(schedule), since_tick_ms if since_tick_ms is not None else -1
        with self._lock:
            rows = [
                row
                for row in self._rows.values()
                if row.namespace == self.namespace
                and row.schedule_key == wanted
                and row.trigger == "auto"
                and row.tick_ms >= floor
            ]
        rows.sort(key=lambda row: row.tick_ms, reverse=True)
        return [row.state for row in rows[:limit]]

    def states(self, task_ids: Sequence[str]) -> dict[str, RunState]:
        with self._lock:
            return {t: row.state for t in task_ids if (row := self._mine(self._rows.get(t)))}

    def prune_runs(self, limit: int) -> int:
        """In every namespace (rule 9)."""
        with self._lock:
            now = self.clock.now_ms()
            kept = {e.task_id for e in self._t.enqueued}
            doomed = [
                task_id
                for task_id, row in self._rows.items()
                if row.expires_at_ms is not None and row.expires_at_ms < now and task_id not in kept
            ][: max(0, limit)]
            for task_id in doomed:
                del self._rows[task_id]
                self._attempts.pop(task_id, None)
        return len(doomed)

    # -- worker presence (rule 8) ---------------------------------------------------------------
    def announce_worker(self, hostname: str, queues: Sequence[str]) -> None:
        with self._lock:
            seen = WorkerSeen(hostname, tuple(queues), self.clock.now_ms())
            self._t.workers[self.namespace, hostname] = seen

    def forget_worker(self, hostname: str) -> None:
        with self._lock:
            self._t.workers.pop((self.namespace, hostname), None)

    def live_workers(self, ttl_ms: int) -> list[WorkerSeen]:
        with self._lock:
            floor = self.clock.now_ms() - ttl_ms
            live = [
                seen
                for (namespace, _), seen in self._t.workers.items()
                if namespace == self.namespace and seen.last_seen_ms >= floor
            ]
        return sorted(live, key=lambda worker: worker.hostname)

    def close(self) -> None:
        """Nothing to release."""


if TYPE_CHECKING:

    def _tracks(runs: MemoryRuns) -> RunTracking:
        """mypy proves here that MemoryRuns keeps the whole RunTracking protocol."""
        return runs

    def _claims(runs: MemoryRuns) -> Claims:
        """... and the whole Claims protocol."""
        return runs
