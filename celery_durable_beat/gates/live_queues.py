"""The ``require_worker`` gate (SPEC §2): is a live worker consuming the queue of this tick?

Workers announce themselves and the queues they consume (``worker/presence.py``); the rows live
where run tracking lives. ``QueueWatch`` is called once per round at most — by the round gate,
on the first tick of a schedule with ``require_worker`` — and reads the live workers once,
returning the check for each tick of the round. The queue is resolved as ``app.send_task``
resolves it for the tick's message (``QueueRouter``): the task's own execution options under the
entry's ``options``, then the app's router (``task_routes``, an explicit ``queue`` in ``options``
winning) and ``task_default_queue``. When the live workers cannot be read, every tick passes
(fail open: an unreadable registry never drops ticks), with one warning per outage; a tick whose
queue cannot be resolved passes too, so its publish reports the routing error as any other
tick's would.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

from celery_durable_beat.celery_message import send_kwargs
from celery_durable_beat.exceptions import StoreError
from celery_durable_beat.logs import cause, log_extra
from celery_durable_beat.message import TickMessage
from celery_durable_beat.model import Action
from celery_durable_beat.runs.base import RunTracking

log = logging.getLogger("celery_durable_beat.gates.live_queues")

_EXPLICIT_KEYS = ("time_limit", "soft_time_limit", "expires", "ignore_result")
"""Options ``send_task`` takes out before routing (its own keyword arguments)."""


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
    """``watch() -> check(message) -> bool`` for one round (module docstring); one
    ``live_workers`` read per call."""

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
                    cause(exc),
                    extra=log_extra(Action.RUN_TRACKING_UNAVAILABLE),
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
