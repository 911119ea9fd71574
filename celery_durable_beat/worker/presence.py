"""Which workers are alive and what they consume (SPEC §2 ``require_worker``, §8 ``status``).

The worker side: a worker that ran ``install(app)`` announces its node name and the names of
the queues its consumer consumes (``Announcer``), from its main process only — at consumer start
(``hooks.PresenceStep``) and then on the guard's heartbeat thread, at most once every
``durable_beat_worker_ttl / 3`` — and forgets itself at ``worker_shutdown``. The rows live where
run tracking lives (``RunTracking.announce_worker``, the store), with the store's clock. An
outage never reaches the worker: a failed announce opens the store circuit the run-state writes
share (logged once, ``run_tracking_unavailable``) and is tried again on a later heartbeat.

The beat side: ``QueueWatch`` is the dispatcher's ``worker_check``. Called once per round (only
when a due schedule has ``require_worker``), it reads the live workers once and returns the
check for each tick: is some live worker consuming the queue this tick would be routed to? The
queue is resolved as ``app.send_task`` resolves it for the tick's message (``queue_of``): the
task's own execution options under the entry's ``options``, then the app's router
(``task_routes``, an explicit ``queue`` in ``options`` winning) and ``task_default_queue``. When
the live workers cannot be read, every tick passes (fail open: an unreadable registry never
drops ticks), with one warning per outage; a tick whose queue cannot be resolved passes too,
so its publish reports the routing error as any other tick's would.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from celery_durable_beat.celery_message import send_kwargs
from celery_durable_beat.clock import Clock
from celery_durable_beat.exceptions import StoreError
from celery_durable_beat.message import TickMessage
from celery_durable_beat.model import Action
from celery_durable_beat.runs.base import RunTracking

if TYPE_CHECKING:
    from celery_durable_beat.worker.tracker import Circuit

log = logging.getLogger("celery_durable_beat.worker.presence")

MIN_ANNOUNCE_S = 0.5
"""The shortest interval between two announcements of one worker."""
_EXPLICIT_KEYS = ("time_limit", "soft_time_limit", "expires", "ignore_result")
"""Options ``send_task`` takes out before routing (its own keyword arguments)."""


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
                    type(exc).__name__,
                    extra={"action": Action.RUN_TRACKING_UNAVAILABLE.value},
                )


def consumed_queues(consumer: Any) -> list[str]:
    """The names of the queues a worker's consumer consumes: its task consumer's queues (those
    of ``-Q`` and of ``add_consumer`` / ``cancel_consumer`` since), else, while it reconnects
    and has none, the app's ``consume_from`` it is rebuilt from."""
    queues = getattr(getattr(consumer, "task_consumer", None), "queues", None)
    if queues is None:
        queues = consumer.app.amqp.queues.consume_from.values()
    return sorted({str(queue.name) for queue in list(queues)})


class QueueRouter:
    """``queue_of(message)``: the queue name ``app.send_task`` would route a tick to."""

    def __init__(self, app: Any) -> None:
        self.app = app
        signature = inspect.signature(type(app).send_task)
        # send_task's named parameters never reach the router; the rest are its ``options``.
        self._named = frozenset(signature.parameters) - {"self", "options"}

    def __call__(self, message: TickMessage) -> str | None:
        """None when routing fails (e.g. an unknown queue with ``task_create_missing_queues``
        off): the publish then fails with its own reason."""
        sent = send_kwargs(message)
        options = {k: v for k, v in sent.items() if k not in self._named}
        task_type = self.app._tasks.get(message.task)  # as send_task reads it (no finalize)
        exec_options = getattr(task_type, "_get_exec_options", None)
        if inspect.ismethod(exec_options):
            defaults = {k: v for k, v in (exec_options() or {}).items() if v is not None}
            options = {**defaults, **options}
        for name in _EXPLICIT_KEYS:
            options.pop(name, None)
        try:
            routed = self.app.amqp.router.route(
                options,
                sent.get("route_name") or message.task,
                sent["args"],
                sent["kwargs"],
                task_type,
            )
        except Exception:  # a user's router may raise anything; the publish reports it
            return None
        queue = routed.get("queue")
        name = getattr(queue, "name", queue)
        return str(name) if name else None


class QueueWatch:
    """The dispatcher's ``worker_check``: ``watch() -> check(message) -> bool`` (module
    docstring); one ``live_workers`` read per call."""

    def __init__(self, app: Any, tracking: RunTracking, ttl_s: float) -> None:
        self.tracking = tracking
        self.ttl_ms = round(ttl_s * 1000)
        self.queue_of = QueueRouter(app)
        self._errors: tuple[type[BaseException], ...] = (StoreError, *tracking.errors)
        self._warned = False

    def __call__(self) -> Callable[[TickMessage], bool]:
        try:
            live = self.tracking.live_workers(self.ttl_ms)
        except self._errors as exc:
            if not self._warned:
                self._warned = True
                log.warning(
                    "live workers not read (%s); require_worker ticks are published meanwhile",
                    type(exc).__name__,
                    extra={"action": Action.RUN_TRACKING_UNAVAILABLE.value},
                )
            return _anyone
        self._warned = False
        consumed = frozenset(queue for worker in live for queue in worker.queues)

        def has_worker(message: TickMessage) -> bool:
            queue = self.queue_of(message)
            return queue is None or queue in consumed

        return has_worker


def _anyone(message: TickMessage) -> bool:
    """The check while the registry is unreadable: every tick passes."""
    return True
