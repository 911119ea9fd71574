"""Refusing a duplicate delivery before Celery traces it (SPEC §6: a refused duplicate leaves no
trace in the user's world).

Celery's tracer (``celery.app.trace.build_tracer``) sends ``task_prerun`` and, with
``task_track_started``, writes ``STARTED`` to the result backend *before* it calls the task's
``before_start``; a guard that refuses there has already traced the duplicate. So the guard runs
one step earlier, in the pool process, around the tracer itself: a guarded task class carries
``__trace__`` as a property (``TraceSlot``) whose setter wraps each tracer Celery builds (the
consumer builds them at start and on reconnects, a prefork child again after the fork) in a
function that claims the tick first. A refused delivery never enters the tracer: it returns what
the tracer returns for a task that raised ``Ignore`` (``declined``), so the worker's main process
acknowledges the message and does nothing else — no signal, no result-backend write, no
``task-succeeded``/``task-failed`` event. (Celery's own ``worker_deduplicate_successful_tasks``
declines a redelivery at this same point, before the tracer's first signal.) A delivery the claim
gives back (a redelivered copy that must not wait into its time limit) returns what the tracer
returns for ``Reject(requeue=True)`` (``requeued``): the main process puts the message back in
the broker, and records nothing either.

Why not a custom ``Task.Request`` or consumer strategy, which run in the worker's main process:
the claim must be taken when the run starts. Prefetched messages are handed to the pool at
once and may wait there behind a long task; a claim taken then would show the tick ``started``
(blocking ``overlap``) while it waits, and its heartbeat would have to move between processes.
Celery's ``create_request_cls`` also replaces ``execute_using_pool`` of any ``Task.Request``.
What stays visible for a refused duplicate: the worker's ``task_received`` signal and, with
events on, ``task-received``/``task-started`` events (both sent before any pool process sees it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from celery import states
from celery.app.trace import ExceptionInfo, TraceInfo, trace_ok_t  # billiard's, untyped
from celery.exceptions import Ignore, Reject

Claim = Callable[[Any, Mapping[str, Any]], bool]
"""``claim(task, request)``: False when the delivery is a refused duplicate (logged and counted
by the claim); True to trace it (the claim of a tick is kept aside for the task's request); it
raises ``Reject(requeue=True)`` to give the delivery back to the broker untraced."""
Forget = Callable[[Any, Mapping[str, Any]], None]
"""``forget(task, request)``: once the delivery is traced, give back what ``claim`` kept aside
for it if the task never took it over (the tracer returned before ``before_start``)."""

_TRACER = "_durable_beat_tracer"
"""Where a guarded task instance keeps its wrapped tracer."""


def declined() -> Any:
    """What Celery's tracer returns for a task that raised ``Ignore``: the main process then
    acknowledges the message (``Request.on_failure``) and records nothing."""
    try:
        raise Ignore()
    except Ignore as exc:
        return trace_ok_t(ExceptionInfo(internal=True), TraceInfo(states.IGNORED, exc), 0.0, None)


def requeued(reject: Reject) -> Any:
    """What Celery's tracer returns for a task that raised ``Reject(requeue=True)``: the main
    process gives the message back to the broker (``Request.on_failure`` → ``reject``) and
    records nothing."""
    try:
        raise reject
    except Reject as exc:
        return trace_ok_t(ExceptionInfo(internal=True), TraceInfo(states.REJECTED, exc), 0.0, None)


def guarded_tracer(
    task: Any, tracer: Callable[..., Any], claim: Claim, forget: Forget
) -> Callable[..., Any]:
    """``tracer`` behind the guard: a refused delivery never reaches it. (The request itself is
    left as it is: every key in it becomes a custom header of a retry message.)"""

    def trace(uuid: str, args: Any, kwargs: Any, request: Mapping[str, Any] | None = None) -> Any:
        request = request or {}
        try:
            if not claim(task, request):
                return declined()
        except Reject as reject:  # the claim gives the delivery back to the broker
            return requeued(reject)
        try:
            return tracer(uuid, args, kwargs, request)
        finally:
            forget(task, request)

    trace.__wrapped__ = tracer  # type: ignore[attr-defined]
    return trace


class TraceSlot(property):
    """The ``__trace__`` property of a guarded task class (module docstring); its type marks
    the class as guarded."""


def trace_slot(claim: Claim, forget: Forget) -> TraceSlot:
    """A ``__trace__`` that wraps every tracer set on an instance with ``claim``."""

    def get(task: Any) -> Any:
        found = task.__dict__.get(_TRACER)
        if found is None and task.__dict__.get("__trace__") is not None:
            # Built before the class was moved under the guard (``cover_tasks``): wrap it now.
            found = task.__dict__[_TRACER] = guarded_tracer(
                task, task.__dict__.pop("__trace__"), claim, forget
            )
        return found

    def set_(task: Any, tracer: Callable[..., Any] | None) -> None:
        task.__dict__.pop("__trace__", None)
        wrapped = None if tracer is None else guarded_tracer(task, tracer, claim, forget)
        task.__dict__[_TRACER] = wrapped

    return TraceSlot(get, set_)
