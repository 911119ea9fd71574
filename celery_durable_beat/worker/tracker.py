"""Run-state writes to tracking that never fail a task, and the circuit that guards a backend.

A failed write opens a ``CIRCUIT_S`` circuit (no connection attempts meanwhile, so an outage adds
no latency to tasks); its state is kept (newest per tick and owner, at most ``PENDING_MAX``) and
written once the store answers again.

When the claims live apart from tracking (Redis), the claim is what makes a tick run once, and the
tracking row is the history beat and the console read. Writing it in the task's own thread made
every task wait for two store commits, and a store that answers slowly (not down: the circuit only
opens on an error) slowed every task with it. With ``background=True`` the writes are handed to one
thread that commits whatever has gathered since its last commit (a group commit): one commit for
many runs under load, one per run when idle, and the task never waits for the store. The flusher
lets writes gather ``GATHER_S`` before it commits. Two commits of one tick never overlap (one
waits for the other), which keeps the order of a tick's states (``started`` is never committed
after its ``succeeded``); a write in the caller's thread of a tick no other commit holds goes at
once, so the threads of a ``threads`` pool do not wait behind each other's round trips.
``close`` and ``flush`` commit what is pending, so a worker shutting down
(``worker_process_shutdown``) leaves nothing behind; only a process killed outright can lose the
states of its last few tens of milliseconds, never a claim.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, OrderedDict
from dataclasses import replace

from celery_durable_beat.clock import Clock
from celery_durable_beat.exceptions import StoreError
from celery_durable_beat.logs import cause, log_extra
from celery_durable_beat.model import Action
from celery_durable_beat.runs.base import RunTracking, RunWrite, WriteIf

log = logging.getLogger("celery_durable_beat.worker")

PENDING_MAX = 10_000
"""Most run-state writes kept in memory while the store does not answer."""
CIRCUIT_S = 5.0
"""How long a failed backend is left alone before the next attempt."""
GATHER_S = 0.02
"""How long the flusher lets writes gather after the first one wakes it: under load one commit
carries the states of many runs, and a run that ends within it is written once (its ``started``
replaced by its end before the commit)."""
CLOSE_FLUSH_S = 5.0
"""How long ``close`` waits for the background flusher's last commit."""


class Circuit:
    """Remembers a backend failure for ``CIRCUIT_S`` and logs each outage once."""

    def __init__(self, what: str, action: Action, meanwhile: str, clock: Clock) -> None:
        self.what = what
        self.action = action
        self.meanwhile = meanwhile
        self.clock = clock
        self.closed_at = 0.0
        self.down = False

    def open(self) -> bool:
        return self.down and self.clock.monotonic() < self.closed_at

    def failed(self, exc: BaseException) -> None:
        self.closed_at = self.clock.monotonic() + CIRCUIT_S
        if not self.down:
            self.down = True
            log.warning(
                "%s does not answer (%s); tasks keep running, %s until it answers again",
                self.what,
                cause(exc),
                self.meanwhile,
                extra=log_extra(self.action),
            )

    def ok(self) -> None:
        if self.down:
            self.down = False
            log.info("%s answers again", self.what, extra=log_extra(Action.RUN_TRACKING_RESTORED))


class Tracker:
    """Run-state writes to tracking, in the caller's thread or in the background (module
    docstring)."""

    def __init__(
        self,
        runs: RunTracking,
        counters: Counter[str],
        circuit: Circuit,
        *,
        background: bool = False,
    ) -> None:
        self.runs = runs
        self.circuit = circuit
        self.counters = counters
        self.background = background
        self.errors: tuple[type[BaseException], ...] = (StoreError, *runs.errors)
        self._pending = _Pending()
        self._lock = threading.Lock()
        self._landed = threading.Condition(self._lock)
        self._in_flight: Counter[str] = Counter()
        """Task ids of the writes being committed (by any thread)."""
        self._flushing = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        self.commits = 0
        """Transactions committed (how well the writes are grouped)."""

    def write(self, item: RunWrite | None = None, *, soon: bool = False) -> None:
        """Keep ``item`` (the newest state of its tick wins) and commit what is pending: now, or
        soon in the background (always with ``background``; for this item with ``soon``).
        Without an item: commit now (the heartbeat's retry)."""
        if item is not None:
            self._keep(item)
            if (self.background or soon) and not self._stop.is_set():
                self._ensure_flusher()
                self._wake.set()
                return
            if self._flush_alone(item):
                return
        self.flush()

    def _flush_alone(self, item: RunWrite) -> bool:
        """Commit ``item``, if it is the one pending write, without waiting for another thread's
        commit (the ``threads`` pool: each thread's end would wait behind the others' round
        trips). False when anything else is pending (another thread's write: that thread
        returns once it is committed, which only ``flush`` under ``_flushing`` ensures), the
        circuit is open or a commit of the same tick is under way: ``flush`` then keeps the
        order."""
        with self._lock:
            only = self._pending.only()
            if (
                only is None
                or (only.key.task_id, only.owner) != (item.key.task_id, item.owner)
                or self.circuit.open()
                or only.key.task_id in self._in_flight
            ):
                return False
            batch = self._pending.take()
            self._in_flight[only.key.task_id] += 1
        self._commit(batch)
        return True

    def _keep(self, item: RunWrite) -> None:
        with self._lock:
            self._pending.keep(item)
            while len(self._pending) > PENDING_MAX:
                self._pending.drop_oldest()
                self.counters["tracking_dropped"] += 1

    def flush(self) -> None:
        """Commit every pending write in one transaction, unless the circuit is open."""
        with self._flushing:
            with self._lock:
                if self.circuit.open() or not self._pending:
                    return
                batch = self._pending.take()
                ticks = {w.key.task_id for w in batch}
                self._landed.wait_for(lambda: ticks.isdisjoint(self._in_flight))
                self._in_flight.update(ticks)
            self._commit(batch)

    def _commit(self, batch: list[RunWrite]) -> None:
        """Write ``batch`` (its ticks counted in flight by the caller), then let waiting
        commits of the same ticks go on."""
        try:
            self._write(batch)
        finally:
            with self._lock:
                self._in_flight.subtract({w.key.task_id for w in batch})
                self._in_flight = +self._in_flight  # drops the ticks no commit holds
                self._landed.notify_all()

    def _write(self, batch: list[RunWrite]) -> None:
        """Counters and the circuit change under the lock: commits of different ticks may end
        at the same time."""
        try:
            self.runs.write(batch)
        except self.errors as exc:
            with self._lock:  # the batch first, then what was kept meanwhile
                self.counters["tracking_errors"] += 1
                self.circuit.failed(exc)
                for again in (*batch, *self._pending.take()):
                    self._pending.keep(again)
            return
        with self._lock:
            self.commits += 1
            self.circuit.ok()

    def pending(self) -> int:
        return len(self._pending)

    def _ensure_flusher(self) -> None:
        if self._flusher is not None and self._flusher.is_alive():
            return
        with self._lock:
            if self._flusher is None or not self._flusher.is_alive():
                self._flusher = threading.Thread(
                    target=self._flush_loop, name="durable-beat-tracking", daemon=True
                )
                self._flusher.start()

    def _flush_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._stop.wait(GATHER_S)  # the writes of the next few runs join this commit
            self._wake.clear()
            self.flush()

    def close(self) -> None:
        """Stop the flusher and commit what is pending (best effort: the circuit may be open)."""
        self._stop.set()
        self._wake.set()
        flusher = self._flusher
        if flusher is not None and flusher is not threading.current_thread():
            flusher.join(CLOSE_FLUSH_S)
        self.flush()


class _Pending:
    """Run-state writes waiting for a commit, in order, newest per tick and owner.

    One owner's newer write of a tick replaces its older one (moved last: it is the newest); if
    that older write is the tick's latest (no other owner's write of it came after), the newer
    one also takes over its ``ALWAYS``: the older write would have made the row this owner's, so
    the newer one applies whatever row it meets (a claim's ``started`` and the run's end,
    gathered into one commit). Writes of other owners are kept apart, in order: an ``OWNER``
    write is only equivalent to a write of the same owner."""

    def __init__(self) -> None:
        self.writes: OrderedDict[tuple[str, str], RunWrite] = OrderedDict()
        self._last: dict[str, str] = {}
        """The owner of each tick's latest write."""

    def __len__(self) -> int:
        return len(self.writes)

    def keep(self, item: RunWrite) -> None:
        task_id = item.key.task_id
        older = self.writes.pop((task_id, item.owner), None)
        if (
            older is not None
            and older.write_if is WriteIf.ALWAYS
            and item.write_if is WriteIf.OWNER
            and self._last.get(task_id) == item.owner
        ):
            item = replace(item, write_if=WriteIf.ALWAYS)
        self.writes[(task_id, item.owner)] = item
        self._last[task_id] = item.owner

    def drop_oldest(self) -> None:
        (task_id, owner), _item = self.writes.popitem(last=False)
        if self._last.get(task_id) == owner:
            del self._last[task_id]

    def only(self) -> RunWrite | None:
        """The one write waiting, if exactly one is."""
        if len(self.writes) != 1:
            return None
        return next(iter(self.writes.values()))

    def take(self) -> list[RunWrite]:
        batch = list(self.writes.values())
        self.writes.clear()
        self._last.clear()
        return batch
