"""The worker side's state in one process: claims, run tracking, heartbeats, counters.

``GuardRuntime`` is created lazily, once per process (prefork children get their own after the
fork), on the first tick a task receives: a process that only runs ordinary tasks never builds
one, never connects anywhere.

The decision for each delivery of a tick (``enter``):

- the claim succeeds (no claim yet; the previous holder's claim expired, i.e. its run is lost;
  or the tick waits for a retry and this delivery is that retry) → the task runs, holding the
  claim, whose expiry a heartbeat pushes on every ``run_ttl / 3`` until the run ends;
- the claim is refused → the delivery is a duplicate: counted, logged with the task id, not
  run. One exception: a *redelivered* message (the broker gave it back, e.g. ``acks_late`` after
  its worker died) facing a claim still running waits, polling, up to ``run_ttl``: if the claim
  expires (no heartbeat: the first run is dead) it runs; if the run finishes or keeps
  heartbeating, it is refused;
- the claim backend does not answer → the task runs anyway (fail open) and its run state is
  ``unknown`` until its end is recorded; one warning per outage.

Run-state writes to the store go through ``Tracker``: a failed write opens a 5 s circuit (no
connection attempts meanwhile, so an outage adds no latency to tasks), its state is kept (newest
per tick, at most ``PENDING_MAX``) and written once the store answers again.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from celery_durable_beat.exceptions import StoreError
from celery_durable_beat.model import Action
from celery_durable_beat.runs.base import RunKey, RunState, RunStore, RunWrite, WriteIf
from celery_durable_beat.runs.redis import RedisClaims, dedup_redis_url, is_final
from celery_durable_beat.settings import Settings

log = logging.getLogger("celery_durable_beat.worker")

PENDING_MAX = 10_000
"""Most run-state writes kept in memory while the store does not answer."""
CIRCUIT_S = 5.0
"""How long a failed backend is left alone before the next attempt."""
PRUNE_EVERY_S = 600.0
PRUNE_BATCH = 1000
REDELIVERY_POLL_S = 0.5

_STORE_ERRORS = (StoreError, SQLAlchemyError, OSError)


class Refused(Exception):
    """This delivery is a duplicate of a tick that is running or finished."""

    def __init__(self, state: RunState) -> None:
        super().__init__(state.value)
        self.state = state


@dataclass
class Held:
    """A run this process holds the claim of."""

    key: RunKey
    owner: str
    attempt: int
    claimed: bool
    """False when the run goes ahead without a claim (the backend did not answer)."""


class Circuit:
    """Remembers a backend failure for ``CIRCUIT_S`` and logs each outage once."""

    def __init__(self, what: str, action: Action, meanwhile: str) -> None:
        self.what = what
        self.action = action
        self.meanwhile = meanwhile
        self.closed_at = 0.0
        self.down = False

    def open(self) -> bool:
        return self.down and time.monotonic() < self.closed_at

    def failed(self, exc: BaseException) -> None:
        self.closed_at = time.monotonic() + CIRCUIT_S
        if not self.down:
            self.down = True
            log.warning(
                "%s does not answer (%s); tasks keep running, %s until it answers again",
                self.what,
                type(exc).__name__,
                self.meanwhile,
                extra={"action": self.action.value},
            )

    def ok(self) -> None:
        if self.down:
            self.down = False
            log.info(
                "%s answers again", self.what, extra={"action": Action.RUN_TRACKING_RESTORED.value}
            )


class Tracker:
    """Run-state writes to the store that never fail a task (module docstring)."""

    def __init__(self, runs: RunStore, counters: Counter[str], circuit: Circuit) -> None:
        self.runs = runs
        self.circuit = circuit
        self.counters = counters
        self._pending: OrderedDict[str, RunWrite] = OrderedDict()
        self._lock = threading.Lock()

    def write(self, item: RunWrite | None = None) -> None:
        with self._lock:
            if item is not None:
                self._pending.pop(item.key.task_id, None)
                self._pending[item.key.task_id] = item
                while len(self._pending) > PENDING_MAX:
                    self._pending.popitem(last=False)
                    self.counters["tracking_dropped"] += 1
            if self.circuit.open() or not self._pending:
                return
            batch = list(self._pending.values())
            self._pending.clear()
        try:
            self.runs.write(batch)
        except _STORE_ERRORS as exc:
            self.counters["tracking_errors"] += 1
            self.circuit.failed(exc)
            with self._lock:
                for old in batch:
                    self._pending.setdefault(old.key.task_id, old)
            return
        self.circuit.ok()

    def pending(self) -> int:
        return len(self._pending)


class GuardRuntime:
    """Claims, tracking and heartbeats of one worker process."""

    def __init__(self, app: Any, settings: Settings, runs: RunStore) -> None:
        self.pid = os.getpid()
        self.settings = settings
        self.runs = runs
        url = dedup_redis_url(app, settings)
        self.redis: RedisClaims | None = RedisClaims(url) if url else None
        self.counters: Counter[str] = Counter()
        unchecked = "ticks run without the dedup check, their run state unknown"
        store_circuit = Circuit(
            "the durable beat store",
            Action.RUN_TRACKING_UNAVAILABLE,
            "run states are kept in memory" if self.redis else unchecked,
        )
        self.tracker = Tracker(runs, self.counters, store_circuit)
        self.claim_circuit = (
            Circuit("the dedup Redis", Action.DEDUP_UNAVAILABLE, unchecked)
            if self.redis
            else store_circuit
        )
        self.run_ttl_ms = round(settings.run_ttl * 1000)
        self.dedup_ttl_ms = round(settings.dedup_ttl * 1000)
        self._held: dict[str, Held] = {}
        self._lock = threading.Lock()
        self._beat: threading.Thread | None = None
        self._stop = threading.Event()
        self._next_prune = time.monotonic() + random.uniform(0, PRUNE_EVERY_S)  # noqa: S311

    # -- a delivery starts ----------------------------------------------------------------------
    def enter(self, key: RunKey, hostname: str, attempt: int, redelivered: bool) -> Held:
        """Claim the tick for this delivery, or raise Refused (module docstring)."""
        owner = f"{hostname}:{self.pid}:{uuid.uuid4().hex[:12]}"
        deadline = time.monotonic() + (self.settings.run_ttl + 1 if redelivered else 0)
        while True:
            try:
                found = self._claim(key, owner, attempt)
            except self._errors() as exc:
                return self._fail_open(key, owner, attempt, exc)
            if found is None:
                return self._hold(Held(key, owner, attempt, claimed=True))
            if is_final(found) or time.monotonic() >= deadline:
                self.counters["duplicates_refused"] += 1
                self._shared_count("duplicates_refused")
                raise Refused(found)
            time.sleep(REDELIVERY_POLL_S)

    def _errors(self) -> tuple[type[BaseException], ...]:
        """What a claim backend raises when it does not answer."""
        return _STORE_ERRORS + (self.redis.errors if self.redis else ())

    def _claim(self, key: RunKey, owner: str, attempt: int) -> RunState | None:
        if self.claim_circuit.open():
            raise StoreError("circuit open")
        if self.redis is None:
            found = self.runs.claim(key, owner, attempt, self.run_ttl_ms)
            self.claim_circuit.ok()
            return found
        found = self.redis.claim(key, owner, attempt, self.run_ttl_ms)
        self.claim_circuit.ok()
        if found is None:
            self.tracker.write(
                RunWrite(key, RunState.STARTED, owner, self.run_ttl_ms, WriteIf.ALWAYS)
            )
        return found

    def _fail_open(self, key: RunKey, owner: str, attempt: int, exc: BaseException) -> Held:
        if not self.claim_circuit.open():
            self.claim_circuit.failed(exc)
        self.tracker.write(RunWrite(key, RunState.UNKNOWN, owner, self.run_ttl_ms, WriteIf.OWNER))
        return self._hold(Held(key, owner, attempt, claimed=False))

    def _hold(self, held: Held) -> Held:
        self.counters["claimed" if held.claimed else "unclaimed"] += 1
        with self._lock:
            self._held[held.owner] = held
        self._ensure_heartbeat()
        return held

    def _shared_count(self, name: str) -> None:
        if self.redis is None:
            return
        try:
            self.redis.count(name)
        except self.redis.errors:
            log.debug("shared counter %s not incremented", name)

    # -- a delivery ends ------------------------------------------------------------------------
    def retrying(self, held: Held, delay_s: float) -> None:
        """The run asked for a retry: the retry message (same task id) may claim the tick."""
        self._release_heartbeat(held)
        keep = round(max(0.0, delay_s) * 1000) + self.run_ttl_ms
        self._settle(held, RunState.RETRIED, keep, attempt=held.attempt + 1)

    def leave(self, held: Held, state: RunState | None) -> None:
        """The run ended in ``state``; None means it gave the tick back (requeued)."""
        self._release_heartbeat(held)
        if state is None:
            self._give_back(held)
            return
        self._settle(held, state, self.dedup_ttl_ms, attempt=held.attempt)

    def _settle(self, held: Held, state: RunState, keep_ms: int, attempt: int) -> None:
        if self.redis is not None and not self.claim_circuit.open():
            try:
                self.redis.settle(
                    held.key.task_id, state, held.owner, attempt, keep_ms, WriteIf.OWNER
                )
            except self.redis.errors as exc:
                self.claim_circuit.failed(exc)
        self.tracker.write(RunWrite(held.key, state, held.owner, keep_ms, WriteIf.OWNER))

    def _give_back(self, held: Held) -> None:
        if self.redis is not None:
            try:
                self.redis.release(held.key.task_id, held.owner)
            except self.redis.errors as exc:
                self.claim_circuit.failed(exc)
        # Expired at once: the requeued delivery may claim it.
        self.tracker.write(RunWrite(held.key, RunState.UNKNOWN, held.owner, -1, WriteIf.OWNER))

    def settle_elsewhere(self, key: RunKey, state: RunState, write_if: WriteIf) -> None:
        """A state learnt outside the run (the worker's main process: revoked, time limit)."""
        keep = self.dedup_ttl_ms
        if self.redis is not None:
            try:
                self.redis.settle(key.task_id, state, "worker", 0, keep, write_if)
            except self.redis.errors as exc:
                self.claim_circuit.failed(exc)
        self.tracker.write(RunWrite(key, state, "worker", keep, write_if))

    # -- heartbeats -----------------------------------------------------------------------------
    def _release_heartbeat(self, held: Held) -> None:
        with self._lock:
            self._held.pop(held.owner, None)

    def held(self) -> list[Held]:
        with self._lock:
            return list(self._held.values())

    def _ensure_heartbeat(self) -> None:
        if self._beat is not None and self._beat.is_alive():
            return
        self._beat = threading.Thread(
            target=self._heartbeat_loop, name="durable-beat-heartbeat", daemon=True
        )
        self._beat.start()

    def _heartbeat_loop(self) -> None:
        interval = max(0.5, self.settings.run_ttl / 3)
        while not self._stop.wait(interval):
            self.heartbeat_once()

    def heartbeat_once(self) -> None:
        """Push on the claims of every run in progress; flush pending writes; prune now and then."""
        pairs = [(h.key.task_id, h.owner) for h in self.held() if h.claimed]
        if pairs and self.redis is not None:
            with self._quietly():
                self.redis.heartbeat(pairs, self.run_ttl_ms)
        if pairs and not self.tracker.circuit.open():
            with self._quietly():
                self.runs.heartbeat(pairs, self.run_ttl_ms)
        self.tracker.write()
        if time.monotonic() >= self._next_prune and not self.tracker.circuit.open():
            self._next_prune = time.monotonic() + PRUNE_EVERY_S
            with self._quietly():
                self.runs.prune_runs(PRUNE_BATCH)

    @contextmanager
    def _quietly(self) -> Iterator[None]:
        """A heartbeat that fails is retried at the next one; the outage is logged by writes."""
        try:
            yield
        except self._errors() as exc:
            log.debug("heartbeat step failed: %s", type(exc).__name__)

    def close(self) -> None:
        self._stop.set()
        self.runs.close()
        if self.redis is not None:
            self.redis.close()
