"""The Celery app of the worker-side tests: ``install(app)`` and tasks that log what they did.

Environment: ``BEAT_BROKER``, ``DURABLE_BEAT_URL``, ``BEAT_SCHEDULE`` (JSON of beat_schedule),
``TICKS_FILE`` (one JSON line per execution), ``RECEIPTS_FILE`` (one JSON line per message the
worker received, written by its main process), ``GUARD_RUN_TTL``, ``BEAT_LEASE_URL``,
``BEAT_LEASE_TTL``, ``BEAT_POLL``, ``VISIBILITY_TIMEOUT``, ``GUARD_OFF`` (no ``install``).
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

from celery import Celery, Task, signals

from celery_durable_beat import install, periodic_origin

app = Celery("guardapp", broker=os.environ["BEAT_BROKER"])
app.conf.update(
    task_ignore_result=True,
    timezone="UTC",
    beat_schedule=json.loads(os.environ.get("BEAT_SCHEDULE", "{}")),
    durable_beat_poll_interval=float(os.environ.get("BEAT_POLL", "0.2")),
    durable_beat_lease_ttl=float(os.environ.get("BEAT_LEASE_TTL", "3")),
    durable_beat_run_ttl=float(os.environ.get("GUARD_RUN_TTL", "60")),
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    worker_prefetch_multiplier=1,
)
if os.environ.get("BEAT_LEASE_URL"):
    app.conf.durable_beat_lease_url = os.environ["BEAT_LEASE_URL"]
if os.environ.get("VISIBILITY_TIMEOUT"):
    app.conf.broker_transport_options = {  # give unacked messages back quickly (kombu 5.7)
        "visibility_timeout": float(os.environ["VISIBILITY_TIMEOUT"]),
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    }
if not os.environ.get("GUARD_OFF"):
    install(app)


def _append(path_env: str, row: dict[str, Any]) -> None:
    path = os.environ.get(path_env)
    if not path:
        return
    line = (json.dumps(row) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one write of a short line with O_APPEND: lines never interleave
    finally:
        os.close(fd)


def _row(task: Any, event: str, **extra: Any) -> dict[str, Any]:
    origin = periodic_origin(task.request)
    return {
        "event": event,
        "id": task.request.id,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "retries": task.request.retries,
        "t": time.time(),
        "schedule": origin.schedule if origin else None,
        "tick_ms": origin.tick_ms if origin else None,
        "tick": origin.tick.isoformat() if origin else None,
        "trigger": origin.trigger.value if origin else None,
        **extra,
    }


@signals.task_received.connect
def _received(request: Any = None, **_: Any) -> None:
    _append("RECEIPTS_FILE", {"id": request.id, "pid": os.getpid(), "t": time.time()})


@app.task(name="guardapp.record", bind=True)
def record(self: Any, *args: Any, **kwargs: Any) -> None:
    _append("TICKS_FILE", _row(self, "run", args=list(args)))


@app.task(name="guardapp.sleepy", bind=True)
def sleepy(self: Any, seconds: float = 1.0) -> None:
    _append("TICKS_FILE", _row(self, "start"))
    time.sleep(seconds)
    _append("TICKS_FILE", _row(self, "end"))


@app.task(name="guardapp.late_sleepy", bind=True, acks_late=True)
def late_sleepy(self: Any, seconds: float = 1.0) -> None:
    _append("TICKS_FILE", _row(self, "start"))
    time.sleep(seconds)
    _append("TICKS_FILE", _row(self, "end"))


@app.task(name="guardapp.flaky", bind=True, max_retries=5)
def flaky(self: Any, fails: int = 2, countdown: float = 0.2) -> None:
    _append("TICKS_FILE", _row(self, "run"))
    if self.request.retries < fails:
        raise self.retry(countdown=countdown)


@app.task(name="guardapp.broken", bind=True)
def broken(self: Any) -> None:
    _append("TICKS_FILE", _row(self, "run"))
    raise RuntimeError("this task always fails")


class PlainBase(Task):  # type: ignore[misc]
    """A base class of the user's own, not derived from app.Task."""

    def before_start(self, task_id: str, args: Any, kwargs: Any) -> None:
        _append("TICKS_FILE", {"event": "user_before_start", "id": task_id})


@app.task(name="guardapp.custom_base", bind=True, base=PlainBase)
def custom_base(self: Any) -> None:
    _append("TICKS_FILE", _row(self, "run"))
