"""A worker's presence: which workers are alive and what they consume (SPEC §2, §8 ``status``).

A worker that ran ``install(app)`` announces its node name and the names of the queues its
consumer consumes (``Announcer``), from its main process only — at consumer start
(``hooks.PresenceStep``) and then on the guard's heartbeat thread, at most once every
``durable_beat_worker_ttl / 3`` — and forgets itself at ``worker_shutdown``. The rows live where
run tracking lives (``RunTracking.announce_worker``, the store), with the store's clock, in the
namespace of the worker's own app (SPEC §16; rule 9 of ``runs/base.py``): a pool whose app sets
no namespace is a live worker for the default namespace's ``require_worker`` only, whichever
namespaces' ticks it runs. An outage never reaches the worker: a failed announce opens the store
circuit the run-state writes share (logged once, ``run_tracking_unavailable``) and is tried again
on a later heartbeat.

The beat side, which reads these rows for ``require_worker``, is ``gates/live_queues.py``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from celery_durable_beat.clock import Clock
from celery_durable_beat.exceptions import StoreError
from celery_durable_beat.logs import cause, log_extra
from celery_durable_beat.model import Action
from celery_durable_beat.runs.base import RunTracking

if TYPE_CHECKING:
    from celery_durable_beat.worker.tracker import Circuit

log = logging.getLogger("celery_durable_beat.worker.presence")

MIN_ANNOUNCE_S = 0.5
"""The shortest interval between two announcements of one worker."""


def announce_every(worker_ttl_s: float) -> float:
    """How often a worker announces itself: three times per TTL, so one lost write is harmless."""
    return max(MIN_ANNOUNCE_S, worker_ttl_s / 3)


class Announcer:
    """One worker process's presence: its node name and a live view of its queues.

    ``beat`` writes when due (and the circuit is closed); ``forget`` deletes the row once and
    stops any later ``beat``. A lock orders the two, so an announce in flight cannot bring the
    row back after ``forget``.
    """

    def __init__(
        self,
        tracking: RunTracking,
        hostname: str,
        queues: Callable[[], Sequence[str]],
        every_s: float,
        circuit: Circuit,
        clock: Clock,
    ) -> None:
        self.tracking = tracking
        self.hostname = hostname
        self.queues = queues
        self.every_s = every_s
        self.circuit = circuit
        self.clock = clock
        self.errors: tuple[type[BaseException], ...] = (StoreError, *tracking.errors)
        self._next = 0.0
        self._gone = False
        self._lock = threading.Lock()

    def beat(self) -> None:
        """Announce, if the last announcement is ``every_s`` old; never raises a store error."""
        with self._lock:
            now = self.clock.monotonic()
            if self._gone or now < self._next or self.circuit.open():
                return
            self._next = now + self.every_s
            try:
                self.tracking.announce_worker(self.hostname, sorted(set(self.queues())))
            except self.errors as exc:
                self.circuit.failed(exc)
                return
            self.circuit.ok()

    def resume(self, queues: Callable[[], Sequence[str]]) -> None:
        """The consumer started again (a reconnection, or a worker started anew in this
        process): take its view of the queues and announce at the next heartbeat."""
        with self._lock:
            self.queues = queues
            self._gone = False
            self._next = 0.0

    def forget(self) -> None:
        """The worker shuts down: delete its row (best effort; it expires after the TTL)."""
        with self._lock:
            if self._gone:
                return
            self._gone = True
            if self.circuit.open():
                return
            try:
                self.tracking.forget_worker(self.hostname)
            except self.errors as exc:
                log.debug(
                    "worker %s not forgotten (%s); its row expires by itself",
                    self.hostname,
                    cause(exc),
                    extra=log_extra(Action.RUN_TRACKING_UNAVAILABLE),
                )


def consumed_queues(consumer: Any) -> list[str]:
    """The names of the queues a worker's consumer consumes: its task consumer's queues (those
    of ``-Q`` and of ``add_consumer`` / ``cancel_consumer`` since), else, while it reconnects
    and has none, the app's ``consume_from`` it is rebuilt from."""
    queues = getattr(getattr(consumer, "task_consumer", None), "queues", None)
    if queues is None:
        queues = consumer.app.amqp.queues.consume_from.values()
    return sorted({str(queue.name) for queue in list(queues)})
