"""The worker side (SPEC §6): ``install(app)``, ``periodic_origin``, the dedup guard, run tracking.

``install(app)`` makes every task of the app check, before it runs, whether its delivery is a
tick (the ``periodic_*`` headers beat sets, SPEC §4) and, if it is, claim that tick
(``guard.GuardRuntime.enter``). The check runs in the pool process around Celery's tracer
(``tracer.py``), so a refused duplicate is acknowledged before the tracer sends ``task_prerun``
or writes ``STARTED`` to the result backend: it leaves no trace. ``before_start`` keeps the same
check as a second line (raising ``celery.exceptions.Ignore``) for a tracer built outside the
guarded ``__trace__``; it does nothing for a delivery already claimed.

How every task gets the guard, whatever its base class and pool:

- ``app.Task`` becomes a subclass of itself with the guard, so tasks created after ``install``
  (the usual ``@app.task`` in the app module) carry it;
- at ``worker_init``, before the pool starts (so prefork children inherit it), any registered
  task whose class does not put the guard first (``base=`` a class of the user's own, or a
  subclass overriding ``before_start``) is moved to a subclass of its class that does. Celery's
  own ``celery.*`` tasks are left alone.

The guard's ``retry`` records ``retried`` before the retry message is published, so that message
(same task id, ``retries`` + 1) may claim the tick however soon it arrives. The run's end comes
from ``task_postrun`` (its state); ``task_revoked``, lost pool processes and hard time limits
come from the worker's main process (a limit through a timeout callback each tick's request gets
at ``task_received``, ``time_limits.py``: recorded even when the pool process was killed before
its claim), and so does Celery's ``task_unknown`` (a tick whose task this worker does not
have: recorded ``unknown_task`` against the tick, which the round counts, SPEC §6).

The worker's presence (``presence.py``, SPEC §2 ``require_worker``): a consumer bootstep
(``PresenceStep``, added to the app's consumer blueprint) has the main process's runtime
announce the worker's node name and consumed queues once the task consumer exists, then on the
heartbeat; ``worker_shutdown`` forgets it. That is the one store row a worker keeps on its own.

A second consumer bootstep (``loopwake.LoopWakeStep``) keeps Kombu's event loop from sleeping in
its poll while callbacks (task acks) wait in its queue: on RabbitMQ a ``-P solo`` worker otherwise
stalls up to 10 s after a task now and then (``loopwake.py`` tells why).

A third (``shutdown.WarmShutdownStep``) keeps a warm shutdown of a prefork worker from dropping
the jobs its pool processes already hold: Celery 5.7 then hangs ~30 s and leaves their messages
unacknowledged although they ran (``shutdown.py`` tells why).

A task without the headers costs one attribute lookup: no store, no Redis.

Namespaces (SPEC §16): a tick is claimed, and its run states written, in the namespace its task
id names (``runs.base.tick_namespace``), whatever the worker's own ``durable_beat_namespace``,
so one worker pool serves the ticks of several apps, each in its own namespace, once each. The
``periodic_namespace`` header says the same for every tick beat sends; a delivery whose header
and id disagree is claimed under the id's (the id is what every claim of the tick dedups on,
so every worker must agree on where its claim is) and counted (``namespace_mismatch``). The
worker's presence and shared counters are in its own app's namespace.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import weakref
from collections import Counter
from collections.abc import Mapping
from datetime import datetime
from functools import partial
from typing import Any, cast

from celery import bootsteps, signals
from celery.exceptions import Ignore, Reject, SoftTimeLimitExceeded, WorkerLostError

from celery_durable_beat.ids import is_tick_id
from celery_durable_beat.logs import log_extra
from celery_durable_beat.model import Action, Trigger
from celery_durable_beat.runs.base import RunKey, RunState, WriteIf
from celery_durable_beat.runs.factory import make_runs, make_tracking
from celery_durable_beat.settings import Settings
from celery_durable_beat.worker.guard import GiveBack, GuardRuntime, Held, Refused
from celery_durable_beat.worker.loopwake import LoopWakeStep
from celery_durable_beat.worker.origin import periodic_origin
from celery_durable_beat.worker.presence import consumed_queues
from celery_durable_beat.worker.shutdown import WarmShutdownStep
from celery_durable_beat.worker.time_limits import hook as hook_time_limit
from celery_durable_beat.worker.tracer import TraceSlot, trace_slot

log = logging.getLogger("celery_durable_beat.worker")

_INSTALLED = "_durable_beat_worker"
_HELD = "durable_beat_held"
_RETRIED = "durable_beat_retried"
_GUARD_MARK = "_durable_beat_guard"


class _Installation:
    """What ``install`` attached to one app: settings and one runtime per process."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._runtimes: dict[int, GuardRuntime] = {}
        self._lock = threading.Lock()
        self._settings: Settings | None = None
        self.worker_limits: tuple[float | None, float | None] = (None, None)
        """The worker's own ``--time-limit`` and ``--soft-time-limit`` (``worker_init``; a
        prefork child inherits them): the pool's limits for a task and message without one."""

    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = Settings.from_conf(self.app.conf)
        return self._settings

    def runtime(self) -> GuardRuntime:
        # Keyed by pid: a prefork child builds its own (its parent's connections are not its own;
        # the parent's runtime stays referenced, so it is never closed from the child).
        pid = os.getpid()
        found = self._runtimes.get(pid)
        if found is None:
            with self._lock:
                found = self._runtimes.get(pid)
                if found is None:
                    settings = self.settings()
                    runs = make_runs(self.app, settings, settings.url)
                    found = GuardRuntime(settings, runs, background_writes=True)
                    self._runtimes[pid] = found
        return found

    def existing_runtime(self) -> GuardRuntime | None:
        return self._runtimes.get(os.getpid())

    def after_fork(self) -> None:
        self._lock = threading.Lock()


def _installation(app: Any) -> _Installation | None:
    found = getattr(app, _INSTALLED, None)
    return found if isinstance(found, _Installation) else None


def install(app: Any) -> None:
    """Wire the worker side of durable beat into ``app`` (call once, in the app module).

    Idempotent. Ticks delivered to this app's workers are then run at most once per tick id
    (within ``durable_beat_dedup_ttl``) and their run states tracked; see ``docs/worker.md``.
    """
    if _installation(app) is not None:
        return
    installed = _Installation(app)
    setattr(app, _INSTALLED, installed)
    _APPS.append(installed)
    app.Task = guarded_class(app.Task)
    app.steps["consumer"].add(PresenceStep)
    app.steps["consumer"].add(LoopWakeStep)
    app.steps["consumer"].add(WarmShutdownStep)
    _connect_signals()


class PresenceStep(bootsteps.StartStopStep):  # type: ignore[misc]
    """Consumer bootstep: once the task consumer exists (after every (re)connection), the main
    process announces this worker and its queues, then keeps doing so on the heartbeat. Its
    ``shutdown`` (the consumer's last, on a warm or a cold shutdown alike: a cold one sends no
    ``worker_shutdown``) forgets the worker."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def start(self, c: Any) -> None:
        installed = _installation(c.app)
        if installed is not None:
            installed.runtime().present(str(c.hostname), partial(consumed_queues, c))

    def shutdown(self, c: Any) -> None:
        _forget(c.app)


def _on_worker_shutdown(sender: Any = None, **_: Any) -> None:
    _forget(getattr(sender, "app", None))


def _forget(app: Any) -> None:
    """This worker is going away: its presence row is deleted (idempotent)."""
    installed = _installation(app)
    runtime = installed.existing_runtime() if installed else None
    if runtime is not None:
        runtime.forget()
        runtime.flush()


def _on_process_shutdown(**_: Any) -> None:
    """A pool process exits (warm shutdown, ``max_tasks_per_child``): its run states still
    waiting for the background commit are written first."""
    for installed in _APPS:
        runtime = installed.existing_runtime()
        if runtime is not None:
            runtime.flush()


# -- the guard on the task class ----------------------------------------------------------------


_GUARDED: weakref.WeakKeyDictionary[type, type] = weakref.WeakKeyDictionary()


def _make_guarded(cls: type) -> type:
    def before_start(self: Any, task_id: str, args: Any, kwargs: Any) -> None:
        enter(self)
        cast(Any, super(guarded, self)).before_start(task_id, args, kwargs)

    def retry(self: Any, *args: Any, **kwargs: Any) -> Any:
        retrying(self, args, kwargs)
        return cast(Any, super(guarded, self)).retry(*args, **kwargs)

    for fn in (before_start, retry):
        setattr(fn, _GUARD_MARK, True)
    guarded: type = type(
        cls.__name__,
        (cls,),
        {
            "__trace__": trace_slot(claim_request, forget_request),
            "before_start": before_start,
            "retry": retry,
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__,
        },
    )
    return guarded


def guard_first(cls: type) -> bool:
    """Whether the first ``__trace__``, ``before_start`` and ``retry`` on ``cls``'s MRO are the
    guard's."""
    return isinstance(getattr(cls, "__trace__", None), TraceSlot) and all(
        getattr(getattr(cls, name, None), _GUARD_MARK, False) for name in ("before_start", "retry")
    )


def guarded_class(cls: type) -> type:
    """``cls`` itself if the guard runs first on it, else a subclass of it where it does."""
    if guard_first(cls):
        return cls
    found = _GUARDED.get(cls)
    if found is None:
        found = _GUARDED[cls] = _make_guarded(cls)
    return found


def cover_tasks(app: Any) -> list[str]:
    """Put the guard first on every registered task of ``app``; the names of those moved."""
    moved = []
    for name, task in list(app.tasks.items()):
        if name.startswith("celery.") or guard_first(type(task)):
            continue
        task.__class__ = guarded_class(type(task))
        moved.append(name)
    return moved


# -- one delivery ---------------------------------------------------------------------------------


_ENTERED: dict[tuple[str, int], Held] = {}
"""Claims the tracer's guard took, by task id and thread, until ``before_start`` moves each onto
its task's request (a key added to the request itself would travel on as a custom header of
retries). The thread is part of the key: in a ``threads`` pool a retry (same task id) may be
claimed in one thread while its first run's tracer still ends in another, whose clean-up must
not drop the retry's claim. A delivery is traced, claimed and started in one thread."""


def _entered_key(task_id: object) -> tuple[str, int]:
    return str(task_id), threading.get_ident()


def claim_request(task: Any, request: Mapping[str, Any]) -> bool:
    """Claim the tick of this delivery (kept in ``_ENTERED``); False for a refused duplicate
    (logged, counted); True for an ordinary task, which costs one attribute lookup."""
    if request.get("is_eager"):
        return True
    installed = _installation(task.app)
    origin = None if installed is None else periodic_origin(request)
    if installed is None or origin is None:
        return True
    task_id = str(request.get("id"))
    key = RunKey(task_id, origin.schedule, origin.tick_ms, origin.trigger.value)
    delivery = request.get("delivery_info") or {}
    runtime = installed.runtime()
    if origin.namespace != key.namespace:  # the id decides (module docstring)
        runtime.counters["namespace_mismatch"] += 1
    try:
        held = runtime.enter(
            key,
            hostname=str(request.get("hostname") or socket.gethostname()),
            attempt=int(request.get("retries") or 0),
            redelivered=bool(delivery.get("redelivered")),
            time_limit_s=time_limit(task, request, installed.worker_limits),
            interrupts=(SoftTimeLimitExceeded,),
        )
    except GiveBack as gave_back:
        log.info(
            "redelivery of %s met its tick's claim still held and went back to the broker "
            "after %.1fs rather than wait into its time limit",
            task_id,
            gave_back.waited_s,
            extra=log_extra(
                Action.REQUEUED_FOR_CLAIM,
                task_id=task_id,
                schedule=origin.schedule,
                namespace=key.namespace,
            ),
        )
        raise Reject(str(gave_back), requeue=True) from None
    except Refused as refused:
        log.info(
            "duplicate delivery of %s not executed: the tick is already %s",
            task_id,
            refused.state.value,
            extra=log_extra(
                Action.DUPLICATE_REFUSED,
                task_id=task_id,
                schedule=origin.schedule,
                namespace=key.namespace,
                run_state=refused.state.value,
            ),
        )
        return False
    _ENTERED[_entered_key(task_id)] = held
    return True


def time_limit(
    task: Any, request: Mapping[str, Any], worker_limits: tuple[float | None, float | None]
) -> float | None:
    """The shortest time limit this delivery runs under, as Celery picks each (the message's
    ``timelimit``, else the task's, else the worker's); None without one."""
    sent = request.get("timelimit") or (None, None)
    hard = sent[0] or getattr(task, "time_limit", None) or worker_limits[0]
    soft = sent[1] or getattr(task, "soft_time_limit", None) or worker_limits[1]
    limits = [float(x) for x in (hard, soft) if x]
    return min(limits) if limits else None


def forget_request(task: Any, request: Mapping[str, Any]) -> None:
    """The delivery is traced. A claim ``before_start`` did not take over means the tracer
    returned before the task could start (``task_track_started`` with a result backend that
    failed to store ``STARTED``, Celery's ``worker_deduplicate_successful_tasks``): nothing ran,
    so the tick is given back, not left ``started`` and heartbeated for the process's life."""
    held = _ENTERED.pop(_entered_key(request.get("id")), None)
    if held is None:  # the usual case: before_start took it over, or not a tick
        return
    installed = _installation(getattr(task, "app", None))
    if installed is not None:
        installed.runtime().leave(held, None)


def enter(task: Any) -> None:
    """The guard in ``before_start``: take over the claim the tracer's guard made, else claim
    the tick now or refuse the delivery (raises Ignore)."""
    request = task.request
    if getattr(request, _HELD, None) is not None or getattr(request, "is_eager", False):
        return
    held = _ENTERED.pop(_entered_key(request.id), None)
    if held is None:
        fields = {"id": request.id, "hostname": request.hostname, "retries": request.retries}
        fields.update(delivery_info=request.delivery_info, **(request.headers or {}))
        fields.update(vars(request))
        if not claim_request(task, fields):
            raise Ignore()
        held = _ENTERED.pop(_entered_key(request.id), None)
    setattr(request, _HELD, held)


def retrying(task: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Record ``retried`` before ``Task.retry`` publishes the retry message."""
    request = task.request
    held = getattr(request, _HELD, None)
    installed = _installation(task.app)
    if not isinstance(held, Held) or installed is None:
        return
    limit = kwargs.get("max_retries", args[6] if len(args) > 6 else None)
    limit = task.max_retries if limit is None else limit
    if limit is not None and int(request.retries or 0) + 1 > limit:
        return  # Task.retry will raise MaxRetriesExceededError: no retry message
    installed.runtime().retrying(held, _retry_delay(task, args, kwargs))
    setattr(request, _RETRIED, True)


def _retry_delay(task: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> float:
    eta = kwargs.get("eta", args[4] if len(args) > 4 else None)
    countdown = kwargs.get("countdown", args[5] if len(args) > 5 else None)
    if isinstance(eta, datetime) and eta.tzinfo is not None:
        return (eta - datetime.now(eta.tzinfo)).total_seconds()
    if countdown is None:
        countdown = task.default_retry_delay
    return float(countdown or 0)


def _end_state(state: str | None, retval: Any) -> RunState | None:
    """The run state a traced execution ended in; None when the message goes back to the queue."""
    if state == "SUCCESS":
        return RunState.SUCCEEDED
    if state == "IGNORED":  # the task raised Ignore itself: it chose to end quietly
        return RunState.SUCCEEDED
    if state == "REJECTED":
        return None if isinstance(retval, Reject) and retval.requeue else RunState.FAILED
    return RunState.FAILED


def _on_postrun(
    sender: Any = None, task: Any = None, state: str | None = None, retval: Any = None, **_: Any
) -> None:
    task = task or sender
    request = getattr(task, "request", None)
    held = getattr(request, _HELD, None)
    installed = _installation(getattr(task, "app", None))
    if not isinstance(held, Held) or installed is None:
        return
    setattr(request, _HELD, None)
    runtime = installed.runtime()
    if state == "RETRY":
        if not getattr(request, _RETRIED, False):  # Retry raised without Task.retry
            runtime.retrying(held, float(task.default_retry_delay or 0))
        return
    acks_late = bool(getattr(task, "acks_late", False))
    if state is None and acks_late:
        # Cut short by SystemExit / KeyboardInterrupt (Celery's tracer sets no state and
        # re-raises): the process is going away, its message unacknowledged, and the broker
        # redelivers it (a cold shutdown cancels a run so). The tick is given back at once, so
        # the redelivery runs it instead of meeting ``failed``. Where a hard time limit killed
        # the process, the main process recorded ``failed`` first, under its own owner, which
        # this give-back leaves alone (``time_limits.py``).
        runtime.leave(held, None)
        runtime.flush()
        return
    runtime.leave(held, _end_state(state, retval), acked=not acks_late)


def _on_revoked(
    sender: Any = None,
    request: Any = None,
    expired: bool = False,
    terminated: bool = False,
    **_: Any,
) -> None:
    """A revoked tick, or one whose ``expires`` passed before it started (``expired``).

    A run terminated by its revoke (``terminated``: the overlap policy ``replace``) ends
    ``revoked`` whatever it held. A delivery discarded before it ran (expired, or revoked on
    arrival or in the pool's queue) is recorded only where no run of the tick has started
    (``NOT_STARTED``): it may be a duplicate of a tick that ran or is running, whose state it
    must not replace (Celery discards it in the main process, before the guard sees it)."""
    installed = _installation(getattr(sender, "app", None))
    origin = periodic_origin(request)
    if installed is None or origin is None:
        return
    key = RunKey(str(request.id), origin.schedule, origin.tick_ms, origin.trigger.value)
    state = RunState.EXPIRED if expired else RunState.REVOKED
    write_if = WriteIf.ALWAYS if terminated else WriteIf.NOT_STARTED
    installed.runtime().settle_elsewhere(key, state, write_if)


def _on_failure(
    sender: Any = None, task_id: str | None = None, exception: Any = None, **_: Any
) -> None:
    """Lost pool processes, reported by the main process (a hard time limit's ``task_failure``
    is left alone: ``time_limits.py`` records the limit, once)."""
    if not isinstance(exception, WorkerLostError):
        return  # other failures end in the pool process, through task_postrun
    if getattr(sender, "acks_late", False) and getattr(sender, "reject_on_worker_lost", False):
        return  # Celery requeues the message: its redelivery runs the tick (guarantee 3)
    installed = _installation(getattr(sender, "app", None))
    if installed is None or not task_id or not is_tick_id(task_id):
        return
    key = RunKey(task_id, "", 0, Trigger.AUTO.value)
    installed.runtime().settle_elsewhere(key, RunState.FAILED, WriteIf.UNFINISHED)


def _on_received(sender: Any = None, request: Any = None, **_: Any) -> None:
    """The main process received a task: a tick's request gets the time-limit callback."""
    installed = _installation(getattr(sender, "app", None))
    if installed is not None and request is not None and is_tick_id(str(request.id)):
        hook_time_limit(request, installed.runtime)


def _on_unknown(
    sender: Any = None, message: Any = None, name: str | None = None, **fields: Any
) -> None:
    """A tick whose task this worker does not have (Celery rejected the message): recorded
    ``unknown_task`` against the tick, so history shows it and the round counts it."""
    installed = _installation(getattr(sender, "app", None))
    origin = periodic_origin(getattr(message, "headers", None))
    task_id = str(fields.get("id") or "")
    if installed is None or origin is None or not task_id:
        return
    key = RunKey(task_id, origin.schedule, origin.tick_ms, origin.trigger.value)
    log.warning(
        "tick %s names task %r, which this worker does not have",
        task_id,
        name,
        extra=log_extra(Action.UNKNOWN_TASK, task_id=task_id, schedule=origin.schedule),
    )
    installed.runtime().unknown_task(key)


def _on_worker_init(sender: Any = None, **_: Any) -> None:
    installed = _installation(getattr(sender, "app", None))
    if installed is None:
        return
    settings = installed.settings()  # a bad setting stops the worker here, not a task later
    installed.worker_limits = (
        getattr(sender, "time_limit", None),
        getattr(sender, "soft_time_limit", None),
    )
    make_tracking(settings.url, settings.namespace)
    moved = cover_tasks(installed.app)
    if moved:
        log.debug(
            "durable beat guard put first on %d task(s): %s",
            len(moved),
            ", ".join(moved),
            extra=log_extra(Action.GUARD_INSTALLED),
        )


_connected = False


def _connect_signals() -> None:
    global _connected  # noqa: PLW0603 - one set of receivers per process, for every app
    if _connected:
        return
    _connected = True
    signals.task_postrun.connect(_on_postrun, weak=False, dispatch_uid="durable_beat_postrun")
    signals.task_revoked.connect(_on_revoked, weak=False, dispatch_uid="durable_beat_revoked")
    signals.task_failure.connect(_on_failure, weak=False, dispatch_uid="durable_beat_failure")
    signals.task_unknown.connect(_on_unknown, weak=False, dispatch_uid="durable_beat_unknown")
    signals.task_received.connect(_on_received, weak=False, dispatch_uid="durable_beat_received")
    signals.worker_init.connect(_on_worker_init, weak=False, dispatch_uid="durable_beat_init")
    signals.worker_shutdown.connect(
        _on_worker_shutdown, weak=False, dispatch_uid="durable_beat_shutdown"
    )
    signals.worker_process_shutdown.connect(
        _on_process_shutdown, weak=False, dispatch_uid="durable_beat_process_shutdown"
    )
    os.register_at_fork(after_in_child=_after_fork)


_APPS: list[_Installation] = []


def _after_fork() -> None:
    for installed in _APPS:
        installed.after_fork()


# -- counters -----------------------------------------------------------------------------------


def counters(app: Any) -> dict[str, int]:
    """This process's guard counters for ``app``: ``claimed``, ``duplicates_refused``,
    ``unclaimed`` (ran without the dedup check: backend down), ``tracking_errors``,
    ``tracking_dropped``, ``namespace_mismatch`` (a tick whose ``periodic_namespace`` header
    names another namespace than its id: claimed under the id's)."""
    installed = _installation(app)
    runtime = installed.existing_runtime() if installed else None
    total: Counter[str] = Counter()
    if runtime is not None:
        total.update(runtime.counters)
    return dict(total)


def shared_counters(app: Any) -> dict[str, int]:
    """Counters every worker of ``app`` adds to in Redis (``duplicates_refused``); empty when
    claims live in the store."""
    installed = _installation(app)
    if installed is None:
        return {}
    return installed.runtime().claims.counters()
