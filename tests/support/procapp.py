"""The one Celery app every process test runs, as ``celery beat`` and as ``celery worker``.

All of its configuration comes from the environment, written by ``tests/support/rig.py``
(``app_env``), so one module serves the beat tests (guard off: every delivery executes, so a test
sees exactly what beat sent) and the worker tests (``install(app)``, tasks that log what they did):

``BEAT_BROKER``, ``DURABLE_BEAT_URL`` (read by the product itself), ``BEAT_SCHEDULE`` (JSON of
beat_schedule), ``BEAT_TIMEZONE`` (``app.conf.timezone``, default UTC), ``BEAT_LEASE_URL``,
``BEAT_LEASE_OPTIONS`` (JSON of ``durable_beat_lease_transport_options``), ``BEAT_LEASE_TTL``,
``BEAT_POLL``, ``GUARD`` (``0``: no ``install(app)``; by default the app calls it),
``GUARD_RUN_TTL``, ``VISIBILITY_TIMEOUT``,
``QUARANTINE_AFTER``, ``SENTRY_ENVELOPES`` and ``OTEL_SPANS`` (Sentry and OpenTelemetry in this
process, writing what they send to those files: ``tests/support/observers.py``),
``METRICS_PORT`` (``durable_beat_metrics_port``), ``LIVENESS_S``
(``durable_beat_liveness_s``),
``RESULT_BACKEND`` (results kept there, with ``task_track_started``; else
none), ``TASK_QUEUE`` (the default queue, for a test of its own on a shared RabbitMQ),
``TASK_ROUTES`` (JSON of ``task_routes``), ``WORKER_TTL`` (``durable_beat_worker_ttl``),
``HISTORY_KEEP`` (``durable_beat_history_keep``), ``BEAT_NAMESPACE``
(``durable_beat_namespace``), ``APP_MAIN`` (the app's ``main``), ``REDELIVER_AFTER``
(``durable_beat_redeliver_after``), ``BEAT_FAULT`` (a fault plan this process arms
with ``faults.arm``: the package itself reads no variable for faults); and the
evidence files: ``TICKS_FILE`` (one JSON line per task event), ``RECEIPTS_FILE`` (one JSON line
per message the worker's main process received), ``SIGNALS_FILE`` (one JSON line per
``task_prerun`` / ``task_postrun`` the user's app saw), ``ACTIONS_FILE`` (one JSON line per log
record that carries an ``action``: the stable vocabulary tests wait on instead of prose),
``HOOKS_FILE`` (one JSON line per enqueue hook the process sent) and ``SLACK_WEBHOOK_URL`` (the
docs' Slack example connected: ``tests/support/hook_log.py``).

Two orders of a hard time limit and the guard's claim, each made certain rather than likely:
a message serialised with ``STALL_SERIALIZER`` stalls its pool process while the body is
decoded, which Celery does before it calls the (guarded) tracer, so before the claim; the task
``procapp.started_sleepy`` holds the main process's event loop, which fires the limit, until its
run has started (claimed, ``started`` committed to tracking), so after the claim.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from typing import Any

from celery import Celery, Task, signals
from celery.worker.request import Request
from kombu.serialization import register

from celery_durable_beat import faults, install, periodic_origin
from celery_durable_beat.runs.base import RunState
from celery_durable_beat.runs.sql import SqlRunStore

HEADERS = (
    "periodic_schedule",
    "periodic_tick_ms",
    "periodic_trigger",
    "periodic_task_name",
    "periodic_namespace",
)
"""The tick headers a task row records, as ``task.request`` has them on the worker (where
django-celery-results reads ``periodic_task_name``)."""

if os.environ.get("BEAT_FAULT"):  # the crash tests' plan; armed before any round can run
    faults.arm(os.environ["BEAT_FAULT"])

# ``APP_MAIN``: the app's ``main`` name (config sync keeps and archives one app's rows, SPEC §16).
app = Celery(os.environ.get("APP_MAIN") or "procapp", broker=os.environ["BEAT_BROKER"])
app.conf.update(
    task_ignore_result=True,
    timezone=os.environ.get("BEAT_TIMEZONE") or "UTC",
    beat_schedule=json.loads(os.environ.get("BEAT_SCHEDULE", "{}")),
    durable_beat_poll_interval=float(os.environ.get("BEAT_POLL", "0.2")),
    durable_beat_lease_ttl=float(os.environ.get("BEAT_LEASE_TTL", "30")),
    durable_beat_run_ttl=float(os.environ.get("GUARD_RUN_TTL", "60")),
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    worker_prefetch_multiplier=1,
)
if os.environ.get("TASK_QUEUE"):  # a queue of the test's own on a shared RabbitMQ
    app.conf.task_default_queue = os.environ["TASK_QUEUE"]
if os.environ.get("TASK_ROUTES"):
    app.conf.task_routes = json.loads(os.environ["TASK_ROUTES"])
if os.environ.get("BEAT_BATCH_SIZE"):  # small batches: every second is a burst of rounds
    app.conf.durable_beat_batch_size = int(os.environ["BEAT_BATCH_SIZE"])
if os.environ.get("BEAT_NAMESPACE"):  # durable_beat_namespace (SPEC §16)
    app.conf.durable_beat_namespace = os.environ["BEAT_NAMESPACE"]
if os.environ.get("HISTORY_KEEP"):
    app.conf.durable_beat_history_keep = int(os.environ["HISTORY_KEEP"])
if os.environ.get("REDELIVER_AFTER"):  # redelivery of lost ticks (SPEC §6)
    app.conf.durable_beat_redeliver_after = float(os.environ["REDELIVER_AFTER"])
if os.environ.get("WORKER_TTL"):
    app.conf.durable_beat_worker_ttl = float(os.environ["WORKER_TTL"])
if os.environ.get("BEAT_LEASE_URL"):
    app.conf.durable_beat_lease_url = os.environ["BEAT_LEASE_URL"]
if os.environ.get("BEAT_LEASE_OPTIONS"):
    app.conf.durable_beat_lease_transport_options = json.loads(os.environ["BEAT_LEASE_OPTIONS"])
if os.environ.get("METRICS_PORT"):
    app.conf.durable_beat_metrics_port = int(os.environ["METRICS_PORT"])
if os.environ.get("LIVENESS_S"):  # durable_beat_liveness_s: /healthz's window (SPEC §17)
    app.conf.durable_beat_liveness_s = float(os.environ["LIVENESS_S"])
if os.environ.get("QUARANTINE_AFTER"):
    app.conf.durable_beat_quarantine_after = int(os.environ["QUARANTINE_AFTER"])
if os.environ.get("RESULT_BACKEND"):
    app.conf.update(
        result_backend=os.environ["RESULT_BACKEND"],
        task_ignore_result=False,
        task_track_started=True,
    )
if os.environ.get("VISIBILITY_TIMEOUT"):
    app.conf.broker_transport_options = {  # give unacked messages back quickly (kombu 5.7)
        "visibility_timeout": float(os.environ["VISIBILITY_TIMEOUT"]),
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    }
STALL_SERIALIZER = "procapp-stall"
STALL_CONTENT_TYPE = "application/x-procapp-stall"
app.conf.accept_content = ["json", STALL_CONTENT_TYPE]
if os.environ.get("GUARD", "1") != "0":
    install(app)
if os.environ.get("SENTRY_ENVELOPES") or os.environ.get("OTEL_SPANS"):
    from tests.support.observers import install_from_env

    install_from_env()


def _append(path_env: str, row: dict[str, Any]) -> None:
    path = os.environ.get(path_env)
    if not path:
        return
    line = (json.dumps(row, default=str) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one write of a short line with O_APPEND: lines never interleave
    finally:
        os.close(fd)


class ActionLog(logging.Handler):
    """Every record with an ``action`` (beat's and the guard's), as a JSON line in ACTIONS_FILE."""

    def emit(self, record: logging.LogRecord) -> None:
        action = getattr(record, "action", None)
        if action is not None:
            _append(
                "ACTIONS_FILE",
                {"action": action, "message": record.getMessage(), "pid": os.getpid()},
            )


logging.getLogger("celery_durable_beat").addHandler(ActionLog())

if os.environ.get("HOOKS_FILE") or os.environ.get("SLACK_WEBHOOK_URL"):  # enqueue hooks
    from tests.support.hook_log import install_from_env as install_hooks

    install_hooks()


def _row(task: Any, event: str, **extra: Any) -> dict[str, Any]:
    """The raw tick headers as the request carries them, and what ``periodic_origin`` makes of
    them: beat tests check the former, worker tests the latter."""
    origin = periodic_origin(task.request)
    return {
        "event": event,
        "id": task.request.id,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "retries": task.request.retries,
        "t": time.time(),
        "headers": {k: getattr(task.request, k, None) for k in HEADERS},
        "schedule": origin.schedule if origin else None,
        "tick_ms": origin.tick_ms if origin else None,
        "tick": origin.tick.isoformat() if origin else None,
        "trigger": origin.trigger.value if origin else None,
        **extra,
    }


@signals.task_received.connect
def _received(request: Any = None, **_: Any) -> None:
    _append("RECEIPTS_FILE", {"id": request.id, "pid": os.getpid(), "t": time.time()})


@signals.task_prerun.connect
def _prerun(task_id: str | None = None, **_: Any) -> None:
    _append("SIGNALS_FILE", {"signal": "task_prerun", "id": task_id, "pid": os.getpid()})


@signals.task_postrun.connect
def _postrun(task_id: str | None = None, **_: Any) -> None:
    _append("SIGNALS_FILE", {"signal": "task_postrun", "id": task_id, "pid": os.getpid()})


@app.task(name="procapp.record", bind=True)
def record(self: Any, *args: Any, **kwargs: Any) -> None:
    _append("TICKS_FILE", _row(self, "run", args=list(args), kwargs=kwargs))


@app.task(name="procapp.echo", bind=True)
def echo(self: Any) -> str:
    """Returns its own task id: a result backend stores it under that id."""
    _append("TICKS_FILE", _row(self, "run"))
    return str(self.request.id)


@app.task(name="procapp.sleepy", bind=True)
def sleepy(self: Any, seconds: float = 1.0) -> None:
    _append("TICKS_FILE", _row(self, "start"))
    time.sleep(seconds)
    _append("TICKS_FILE", _row(self, "end"))


@app.task(name="procapp.late_sleepy", bind=True, acks_late=True)
def late_sleepy(self: Any, seconds: float = 1.0) -> None:
    _append("TICKS_FILE", _row(self, "start"))
    time.sleep(seconds)
    _append("TICKS_FILE", _row(self, "end"))


@app.task(name="procapp.flaky", bind=True, max_retries=5)
def flaky(self: Any, fails: int = 2, countdown: float = 0.2) -> None:
    _append("TICKS_FILE", _row(self, "run"))
    if self.request.retries < fails:
        raise self.retry(countdown=countdown)


@app.task(name="procapp.broken", bind=True)
def broken(self: Any) -> None:
    _append("TICKS_FILE", _row(self, "run"))
    raise RuntimeError("this task always fails")


class PlainBase(Task):  # type: ignore[misc]
    """A base class of the user's own, not derived from app.Task."""

    def before_start(self, task_id: str, args: Any, kwargs: Any) -> None:
        _append("TICKS_FILE", {"event": "user_before_start", "id": task_id})


@app.task(name="procapp.custom_base", bind=True, base=PlainBase)
def custom_base(self: Any) -> None:
    _append("TICKS_FILE", _row(self, "run"))


@app.task(name="procapp.late_record", bind=True, acks_late=True)
def late_record(self: Any) -> None:
    """A short row per run, acknowledged after it: the soak runs a thousand a second and kills
    workers, so a message in flight is redelivered (acks_late), never lost with its worker."""
    origin = periodic_origin(self.request)
    row = {"event": "run", "id": self.request.id, "pid": os.getpid(), "t": time.time()}
    if origin is not None:
        row.update(schedule=origin.schedule, tick_ms=origin.tick_ms)
        row.update(periodic_task_name=getattr(self.request, "periodic_task_name", None))
    _append("TICKS_FILE", row)


# -- a hard time limit before and after the guard's claim ----------------------------------------

_IN_POOL = False


@signals.worker_process_init.connect
def _pool_process(**_: Any) -> None:
    global _IN_POOL  # noqa: PLW0603 - set once in each pool process
    _IN_POOL = True


def _stalling_loads(body: str | bytes) -> Any:
    """In a pool process, never returns: the job is accepted (its time limit runs) but the tracer,
    and so the guard's claim, is never reached. The main process decodes it too, at once."""
    if _IN_POOL:
        _append("TICKS_FILE", {"event": "decoding", "pid": os.getpid(), "t": time.time()})
        while True:
            time.sleep(1)  # the stall itself: the time limit ends it
    return json.loads(body)


register(
    STALL_SERIALIZER,
    json.dumps,
    _stalling_loads,
    content_type=STALL_CONTENT_TYPE,
    content_encoding="utf-8",
)


def _started(task_id: str) -> bool:
    return any(r.get("id") == task_id for r in _read_ticks() if r.get("event") == "start")


def _read_ticks() -> list[dict[str, Any]]:
    path = os.environ.get("TICKS_FILE")
    if not path or not os.path.exists(path):
        return []
    with open(path) as lines:
        return [json.loads(line) for line in lines if line.strip()]


class StartedBeforeLimit(Request):  # type: ignore[misc]
    """Holds the main process's event loop, where the hard time limit fires, from the moment the
    pool process accepted the job until its run has started (or 60 s)."""

    def on_accepted(self, pid: int, time_accepted: float) -> None:
        super().on_accepted(pid, time_accepted)
        deadline = time.monotonic() + 60
        while not _started(self.id) and time.monotonic() < deadline:
            time.sleep(0.02)  # the hold itself: the limit must not fire before the run starts


@app.task(name="procapp.started_sleepy", bind=True, Request=StartedBeforeLimit)
def started_sleepy(self: Any, seconds: float = 60.0) -> None:
    """Says it started once its claim is ``started`` in tracking too, then outlives its limit."""
    runs = SqlRunStore(os.environ["DURABLE_BEAT_URL"])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            record = runs.get_run(self.request.id)
            if record is not None and record.state is RunState.STARTED:
                break
            time.sleep(0.02)  # the background commit of ``started`` (claims in Redis)
    finally:
        runs.close()
    _append("TICKS_FILE", _row(self, "start"))
    time.sleep(seconds)
    _append("TICKS_FILE", _row(self, "end"))
