"""Hard time limits, recorded by the worker's main process (SPEC §6, run tracking).

A hard time limit is the main process's doing. With the prefork pool, billiard starts a timer
when a pool process *accepts* a job (``ApplyResult._ack``); when it fires
(``AsynPool._on_hard_timeout`` → ``Pool.on_hard_timeout``) the main process calls the request's
timeout callback, ``celery.worker.request.Request.on_timeout(soft=False)``, and then terminates
the pool process. The pool process, meanwhile, has to deserialise the message, build the guard's
runtime (its first tick) and claim the tick before the task's body runs; on a busy machine a
short limit fires first, the process is killed before its claim, and a run the pool process
would have recorded is never recorded at all. Only the main process knows, so it records it:

- at ``task_received`` (the main process, every pool), a tick's request gets a timeout callback
  of its own (``TimeLimitHook``, an attribute of that request: Celery's ``execute_using_pool``
  hands ``self.on_timeout`` to the pool). It runs the request's own ``on_timeout`` first, then,
  for a hard limit, records the tick ``failed`` with owner ``TIME_LIMIT_OWNER`` (the reason,
  ``worker:time_limit``) through ``GuardRuntime.settle_elsewhere``, in the claims (Redis or the
  store) and in run tracking, with ``WriteIf.UNLESS_ENDED_OTHERWISE``: a tick never claimed
  (absent) and one still running (``started``) alike; never over a run that ended otherwise
  (``succeeded`` just before the limit, or ``revoked``).
- one end, whatever the order: the callback runs *before* billiard terminates the pool process.
  A pool process that had claimed the tick then dies in billiard's SIGTERM handler
  (``SystemExit`` through the task), and the guard's ``task_postrun`` writes ``failed`` with its
  own owner. Where the main process's write lands first (the claim in Redis, written in the
  callback; the store's row when the claims are the store's) that owner write no longer applies;
  where it lands second (tracking behind the claims in Redis, both writes in the background) the
  same state takes the main process's owner. So the tick ends ``failed``, reason
  ``worker:time_limit``, in every backend. Celery's ``task_failure`` for a hard limit (sent since
  celery/celery#10226, not by older releases) is left alone by ``hooks._on_failure``, and a cold
  shutdown's kills are no time limit (Celery's ``state.should_terminate``): not recorded here;
  nor is the limit of an ``acks_late`` task with ``acks_on_timeout=False``, whose message Celery
  requeues: its redelivery must find the tick given back, not ``failed``.

Pools: prefork as above; gevent calls the same callback in-process (its ``Timeout``); threads,
solo and eventlet enforce no hard time limit at all (Celery ignores ``time_limit`` there), so
nothing fires.

Why not ``Task.Request``: a task may bring a request class of its own, and the guard would have to
subclass each; an attribute on the request instance leaves every class as it is. The hook holds
its request weakly, so the request does not keep itself alive.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from typing import Any

from celery.worker import state

from celery_durable_beat.logs import log_extra
from celery_durable_beat.model import Action
from celery_durable_beat.runs.base import RunKey, RunState, WriteIf
from celery_durable_beat.worker.guard import GuardRuntime
from celery_durable_beat.worker.origin import periodic_origin

log = logging.getLogger("celery_durable_beat.worker")

TIME_LIMIT_OWNER = "worker:time_limit"
"""The owner of a row the main process recorded for a hard time limit: the reason it failed."""


class TimeLimitHook:
    """A tick request's timeout callback: the request's own ``on_timeout``, then the record."""

    __slots__ = ("_request", "_runtime")

    def __init__(self, request: Any, runtime: Callable[[], GuardRuntime]) -> None:
        self._request = weakref.ref(request)
        self._runtime = runtime

    def __call__(self, soft: bool, timeout: float) -> None:
        request = self._request()
        if request is None:
            return
        try:
            type(request).on_timeout(request, soft, timeout)
        finally:
            if not soft and not state.should_terminate and not _requeued_on_timeout(request):
                record(request, timeout, self._runtime())


def _requeued_on_timeout(request: Any) -> bool:
    """Celery gives the message of an ``acks_late`` task with ``acks_on_timeout=False`` back to
    the broker: its redelivery runs the tick, which ``failed`` would make it refuse (the killed
    pool process gives its claim back, ``hooks._on_postrun``)."""
    task = getattr(request, "task", None)
    return bool(getattr(task, "acks_late", False)) and not getattr(task, "acks_on_timeout", True)


def hook(request: Any, runtime: Callable[[], GuardRuntime]) -> None:
    """Give a tick's request (``task_received``) the timeout callback that records its limit."""
    request.on_timeout = TimeLimitHook(request, runtime)


def record(request: Any, timeout: float, runtime: GuardRuntime) -> None:
    """The tick of ``request`` hit its hard limit: ``failed`` unless its run already finished."""
    origin = periodic_origin(request.request_dict)
    if origin is None:
        return  # a tick-shaped id without beat's headers: not one of ours
    task_id = str(request.id)
    log.warning(
        "tick %s hit its hard time limit (%ss): recorded failed unless its run had finished",
        task_id,
        timeout,
        extra=log_extra(Action.TIME_LIMIT, task_id=task_id, schedule=origin.schedule),
    )
    key = RunKey(task_id, origin.schedule, origin.tick_ms, origin.trigger.value)
    runtime.settle_elsewhere(key, RunState.FAILED, WriteIf.UNLESS_ENDED_OTHERWISE, TIME_LIMIT_OWNER)
