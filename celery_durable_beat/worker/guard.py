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
  heartbeating, it is refused. A redelivered message with a time limit (``time_limit_s``: the
  shortest of its hard and soft limits) must not spend it waiting — the limit would fire on a
  run that never started, and Celery acknowledge the message unrun — so it waits at most
  ``LIMIT_SHARE`` of it and then gives its message back to the broker (``GiveBack``, which the
  worker turns into a requeue); so does a copy whose wait is cut short by one of ``interrupts``
  (the soft limit's exception) or that obtained the claim only after waiting: the delivery that
  finds the claim free at once runs the tick, with its whole limit;
- the claim backend does not answer → the task runs anyway (fail open) and its run state is
  ``unknown`` until its end is recorded; one warning per outage.

The runtime sees only the runs port (``runs/base.py``): one ``Claims`` and one ``RunTracking``,
picked by ``runs/factory.py``. When they are one backend (the store), a claim is its tick's run
row and each state is written once, through tracking; when the claims are apart (Redis), every
state is settled there too (``ClaimMirror``), behind a circuit of its own.

In a worker's main process the heartbeat thread also carries the worker's presence
(``presence.Announcer``, started by ``present``): its queues announced every
``durable_beat_worker_ttl / 3``, through the same store circuit as run-state writes.

Run-state writes to tracking go through ``Tracker`` (``tracker.py``): a failed write is kept and
written once the store answers again; with the claims apart, the writes are committed by a
background thread in groups (``background_writes``), so a task never waits for the store. With
the claims in the store, the claim is committed before the run, in the task's thread.

The end of a run whose message was acknowledged before it ran (no ``acks_late``, Celery's
default) is not waited for: tracking's row joins the background flusher's next commit, and with
the claims in Redis the claim's end travels with this process's next claim, one script call for
both (``ClaimMirror``). No broker redelivery of that message can come, and a duplicate delivered
meanwhile meets ``started`` and is refused, as the end would refuse it. A process killed in the
``GATHER_S`` before the end is written leaves the claim ``started`` until its ``run_ttl``
expires, which nothing waits for. An ``acks_late`` run's end is written in the task's thread,
before the worker acknowledges its message: a worker killed between the two leaves a finished
claim, which refuses the broker's redelivery at once (a deferred end lost with the process
would leave ``started``, which the redelivery waits out for ``run_ttl`` and then runs again:
measured, about one rerun per pool process per kill). A ``retried`` state and a give-back are
written at once too: the message that may claim the tick next is published after them.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from celery_durable_beat.clock import Clock, SystemClock
from celery_durable_beat.exceptions import StoreError
from celery_durable_beat.logs import cause, log_extra
from celery_durable_beat.model import Action
from celery_durable_beat.runs.base import (
    Claims,
    RunKey,
    Runs,
    RunState,
    RunWrite,
    WriteIf,
    is_final,
)
from celery_durable_beat.settings import Settings
from celery_durable_beat.worker.presence import Announcer, announce_every
from celery_durable_beat.worker.tracker import CLOSE_FLUSH_S, GATHER_S, Circuit, Tracker

log = logging.getLogger("celery_durable_beat.worker")

PRUNE_EVERY_S = 600.0
PRUNE_BATCH = 1000
REDELIVERY_POLL_S = 0.5
UNKNOWN_TASK_OWNER = "worker:unknown_task"
"""The owner of an ``unknown_task`` row: a later write of the same kind may replace it."""


LIMIT_SHARE = 0.25
"""The share of its shortest time limit a redelivered copy may wait for a held claim."""


class GiveBack(Exception):
    """This redelivered delivery met a claim still held and has a time limit to keep: its message
    goes back to the broker (requeued), not run, not refused."""

    def __init__(self, waited_s: float) -> None:
        super().__init__(f"waited {waited_s:.1f}s")
        self.waited_s = waited_s


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


class NoMirror:
    """Claims that are the tracking rows (the store): the tracker's write of a state settles the
    claim too, so there is nothing more to write."""

    def claim(
        self, claims: Claims, key: RunKey, owner: str, attempt: int, ttl_ms: int
    ) -> RunState | None:
        return claims.claim(key, owner, attempt, ttl_ms)

    def claimed(self, tracker: Tracker, write: RunWrite) -> None:
        """The claim already recorded ``started``."""

    def settle(self, write: RunWrite, *, while_down: bool = False, defer: bool = False) -> None:
        """The tracker's write is the settle."""

    def release(self, task_id: str, owner: str) -> None:
        """The tracker's expired ``unknown`` write is the release."""

    def heartbeat(self, held: Sequence[tuple[str, str]], ttl_ms: int) -> None:
        """Tracking's heartbeat is the claims' heartbeat."""

    def send_deferred(self) -> None:
        """Nothing is deferred."""

    def close(self) -> None:
        """Tracking is closed by its owner."""


class ClaimMirror(NoMirror):
    """Claims apart from tracking (Redis): every state is settled there as well, behind the
    claims' own circuit; a failure opens it and never fails the task.

    A run's end (``defer``) is not sent on its own: it waits for the next claim of this process
    and travels with it, in the same script call (one round trip a tick instead of two), or,
    when no claim comes within ``GATHER_S``, a thread of its own sends whatever waits in one
    call. Only ends are deferred: a duplicate that meets the still ``started`` claim meanwhile
    is refused as it would be by the finished one (a redelivery waits for it). A ``retried``
    state and a give-back are sent at once, before the message that may claim the tick next
    exists."""

    def __init__(self, claims: Claims, circuit: Circuit, gather_s: float = GATHER_S) -> None:
        self.claims = claims
        self.circuit = circuit
        self.gather_s = gather_s
        self._deferred: list[RunWrite] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._sender: threading.Thread | None = None

    def claim(
        self, claims: Claims, key: RunKey, owner: str, attempt: int, ttl_ms: int
    ) -> RunState | None:
        return claims.claim(key, owner, attempt, ttl_ms, self._take())

    def claimed(self, tracker: Tracker, write: RunWrite) -> None:
        tracker.write(write)

    def settle(self, write: RunWrite, *, while_down: bool = False, defer: bool = False) -> None:
        """``while_down``: try even while the circuit is open (a state learnt once)."""
        if self.circuit.open() and not while_down:
            return
        if defer and not self._stop.is_set():
            with self._lock:
                self._deferred.append(write)
            self._ensure_sender()
            self._wake.set()
            return
        try:
            self.claims.settle(write)
        except self.claims.errors as exc:
            self.circuit.failed(exc)

    def _take(self) -> list[RunWrite]:
        with self._lock:
            taken, self._deferred = self._deferred, []
        return taken

    def send_deferred(self) -> None:
        """Send the deferred ends now, in one call (dropped if the claims do not answer: the
        claims stay ``started`` until their ``run_ttl``, as any unsent settle)."""
        taken = self._take()
        if not taken or self.circuit.open():
            return
        try:
            self.claims.settle_many(taken)
        except self.claims.errors as exc:
            self.circuit.failed(exc)

    def _ensure_sender(self) -> None:
        if self._sender is not None and self._sender.is_alive():
            return
        with self._lock:
            if self._sender is None or not self._sender.is_alive():
                self._sender = threading.Thread(
                    target=self._send_loop, name="durable-beat-settles", daemon=True
                )
                self._sender.start()

    def _send_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._stop.wait(self.gather_s)  # the next claim may carry them first
            self._wake.clear()
            self.send_deferred()

    def release(self, task_id: str, owner: str) -> None:
        try:
            self.claims.release(task_id, owner)
        except self.claims.errors as exc:
            self.circuit.failed(exc)

    def heartbeat(self, held: Sequence[tuple[str, str]], ttl_ms: int) -> None:
        self.claims.heartbeat(held, ttl_ms)

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        sender = self._sender
        if sender is not None and sender is not threading.current_thread():
            sender.join(CLOSE_FLUSH_S)
        self.send_deferred()
        self.claims.close()


class GuardRuntime:
    """Claims, tracking and heartbeats of one worker process.

    ``clock`` and ``sleep`` are parameters so the decisions can be tested in milliseconds.
    """

    def __init__(
        self,
        settings: Settings,
        runs: Runs,
        clock: Clock | None = None,
        sleep: Callable[[float], None] = time.sleep,
        *,
        background_writes: bool = False,
        settle_gather_s: float = GATHER_S,
    ) -> None:
        """``background_writes``: commit run states in a thread of their own, in groups, when
        the claims are apart from tracking (``tracker.py``); the store's claims are its rows, so
        they are always written in the task's thread. ``settle_gather_s``: how long a run's end
        waits for the next claim to carry it (``ClaimMirror``)."""
        self.pid = os.getpid()
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        self._sleep = sleep
        self.claims = runs.claims
        self.runs = runs.tracking
        self.counters: Counter[str] = Counter()
        unchecked = "ticks run without the dedup check, their run state unknown"
        store_circuit = Circuit(
            self.runs.where,
            Action.RUN_TRACKING_UNAVAILABLE,
            unchecked if runs.shared else "run states are kept in memory",
            self.clock,
        )
        self.tracker = Tracker(
            self.runs,
            self.counters,
            store_circuit,
            background=background_writes and not runs.shared,
        )
        self.claim_circuit = store_circuit
        self.mirror = NoMirror()
        if not runs.shared:
            self.claim_circuit = Circuit(
                self.claims.where, Action.DEDUP_UNAVAILABLE, unchecked, self.clock
            )
            self.mirror = ClaimMirror(self.claims, self.claim_circuit, settle_gather_s)
        self._errors: tuple[type[BaseException], ...] = (
            StoreError,
            *self.claims.errors,
            *self.runs.errors,
        )
        self.run_ttl_ms = round(settings.run_ttl * 1000)
        self.dedup_ttl_ms = round(settings.dedup_ttl * 1000)
        self._held: dict[str, Held] = {}
        self._lock = threading.Lock()
        self._beat: threading.Thread | None = None
        self._stop = threading.Event()
        self.presence: Announcer | None = None
        jitter = random.uniform(0, PRUNE_EVERY_S)  # noqa: S311 - spreads workers, not a secret
        self._next_prune = self.clock.monotonic() + jitter

    # -- a delivery starts ----------------------------------------------------------------------
    def enter(
        self,
        key: RunKey,
        hostname: str,
        attempt: int,
        redelivered: bool,
        *,
        time_limit_s: float | None = None,
        interrupts: tuple[type[BaseException], ...] = (),
    ) -> Held:
        """Claim the tick for this delivery, or raise Refused, or GiveBack (module docstring)."""
        owner = f"{hostname}:{self.pid}:{uuid.uuid4().hex[:12]}"
        limited = redelivered and time_limit_s is not None and time_limit_s > 0
        wait_s = self.settings.run_ttl + 1 if redelivered else 0
        if limited:
            wait_s = min(wait_s, LIMIT_SHARE * (time_limit_s or 0))
        started = self.clock.monotonic()
        deadline = started + wait_s
        waited = False
        while True:
            try:
                found = self._claim(key, owner, attempt)
            except self._errors as exc:
                return self._fail_open(key, owner, attempt, exc)
            now = self.clock.monotonic()
            if found is None:
                held = Held(key, owner, attempt, claimed=True)
                if limited and waited:  # freed while it waited: part of its limit is spent
                    self._give_back(held)
                    raise GiveBack(now - started)
                return self._hold(held)
            if is_final(found) or (now >= deadline and not limited):
                self.counters["duplicates_refused"] += 1
                self._shared_count("duplicates_refused")
                raise Refused(found)
            if now >= deadline:
                raise GiveBack(now - started)
            try:
                self._sleep(min(REDELIVERY_POLL_S, deadline - now))
            except interrupts:
                raise GiveBack(self.clock.monotonic() - started) from None
            waited = True

    def _claim(self, key: RunKey, owner: str, attempt: int) -> RunState | None:
        if self.claim_circuit.open():
            raise StoreError("circuit open")
        found = self.mirror.claim(self.claims, key, owner, attempt, self.run_ttl_ms)
        self.claim_circuit.ok()
        if found is None:
            started = RunWrite(key, RunState.STARTED, owner, self.run_ttl_ms, WriteIf.ALWAYS)
            self.mirror.claimed(self.tracker, started)
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
        try:
            self.claims.count(name)
        except self.claims.errors:
            log.debug(
                "shared counter %s not incremented",
                name,
                extra=log_extra(Action.DEDUP_UNAVAILABLE),
            )

    # -- a delivery ends ------------------------------------------------------------------------
    def retrying(self, held: Held, delay_s: float) -> None:
        """The run asked for a retry: the retry message (same task id) may claim the tick."""
        self._release_heartbeat(held)
        keep = round(max(0.0, delay_s) * 1000) + self.run_ttl_ms
        self._settle(held, RunState.RETRIED, keep, attempt=held.attempt + 1)

    def leave(self, held: Held, state: RunState | None, *, acked: bool = False) -> None:
        """The run ended in ``state``; None means it gave the tick back (requeued).

        ``acked``: its message was acknowledged before the run (no ``acks_late``), so no broker
        redelivery of it can come: the end is then written soon rather than now (module
        docstring). An ``acks_late`` run's end is written before its message is acknowledged,
        so a worker killed between the two leaves a finished claim that refuses the redelivery
        at once, instead of a ``started`` one that it waits out and then runs again."""
        self._release_heartbeat(held)
        if state is None:
            self._give_back(held)
            return
        self._settle(held, state, self.dedup_ttl_ms, attempt=held.attempt, soon=acked)

    def _settle(
        self, held: Held, state: RunState, keep_ms: int, attempt: int, *, soon: bool = False
    ) -> None:
        write = RunWrite(held.key, state, held.owner, keep_ms, WriteIf.OWNER, attempt)
        # ``retried`` is tried even while the claims' circuit is open: without it the retry
        # message meets ``started`` and is refused.
        self.mirror.settle(write, defer=soon, while_down=state is RunState.RETRIED)
        self.tracker.write(write, soon=soon)

    def _give_back(self, held: Held) -> None:
        self.mirror.release(held.key.task_id, held.owner)
        # Expired at once: the requeued delivery may claim it.
        self.tracker.write(RunWrite(held.key, RunState.UNKNOWN, held.owner, -1, WriteIf.OWNER))

    def settle_elsewhere(
        self, key: RunKey, state: RunState, write_if: WriteIf, owner: str = "worker"
    ) -> None:
        """A state learnt outside the run (the worker's main process: revoked, time limit)."""
        write = RunWrite(key, state, owner, self.dedup_ttl_ms, write_if)
        self.mirror.settle(write, while_down=True)
        self.tracker.write(write)

    def unknown_task(self, key: RunKey) -> None:
        """No task of that name here (Celery's ``task_unknown``): ``unknown_task`` is written
        unless a worker that has the task holds the tick, already expired, so it never blocks
        a later claim (a worker that has the task may still get a duplicate of it)."""
        self.tracker.write(RunWrite(key, RunState.UNKNOWN_TASK, UNKNOWN_TASK_OWNER, -1))

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
        self._announce()
        while not self._stop.wait(self._interval()):
            self.heartbeat_once()

    def _interval(self) -> float:
        """A third of the run TTL, or of the worker TTL once presence is on, if shorter."""
        ttl = self.settings.run_ttl
        if self.presence is not None:
            ttl = min(ttl, self.settings.worker_ttl)
        return max(0.5, ttl / 3)

    # -- presence (the main process) ------------------------------------------------------------
    def present(self, hostname: str, queues: Callable[[], Sequence[str]]) -> None:
        """Announce this worker now and on every heartbeat (``presence.py``); a later call (the
        consumer restarted) takes the new view of the queues, announced at the next heartbeat."""
        if self.presence is not None:
            self.presence.resume(queues)
            return
        self.presence = Announcer(
            self.runs,
            hostname,
            queues,
            announce_every(self.settings.worker_ttl),
            self.tracker.circuit,
            self.clock,
        )
        self._ensure_heartbeat()

    def forget(self) -> None:
        """The worker shuts down: its presence row is deleted (best effort)."""
        if self.presence is not None:
            self.presence.forget()

    def _announce(self) -> None:
        if self.presence is not None:
            self.presence.beat()

    def heartbeat_once(self) -> None:
        """Push on the claims of every run in progress; flush pending writes; prune now and then."""
        self.mirror.send_deferred()
        pairs = [(h.key.task_id, h.owner) for h in self.held() if h.claimed]
        if pairs:
            with self._quietly(Action.DEDUP_UNAVAILABLE):
                self.mirror.heartbeat(pairs, self.run_ttl_ms)
        if pairs and not self.tracker.circuit.open():
            with self._quietly(Action.RUN_TRACKING_UNAVAILABLE):
                self.runs.heartbeat(pairs, self.run_ttl_ms)
        self.tracker.write()
        self._announce()
        if self.clock.monotonic() >= self._next_prune and not self.tracker.circuit.open():
            self._next_prune = self.clock.monotonic() + PRUNE_EVERY_S
            with self._quietly(Action.RUN_TRACKING_UNAVAILABLE):
                self.runs.prune_runs(PRUNE_BATCH)

    @contextmanager
    def _quietly(self, action: Action) -> Iterator[None]:
        """A heartbeat that fails is retried at the next one; the outage is logged by writes."""
        try:
            yield
        except self._errors as exc:
            log.debug("heartbeat step failed: %s", cause(exc), extra=log_extra(action))

    def flush(self) -> None:
        """Send the deferred claim settles and commit the pending run states now (a process
        about to exit)."""
        self.mirror.send_deferred()
        self.tracker.flush()

    def close(self) -> None:
        self._stop.set()
        self.tracker.close()
        self.runs.close()
        self.mirror.close()
