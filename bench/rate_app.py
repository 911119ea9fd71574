"""The worker app of ``bench/worker_rate.py``: one tick task, plain or guarded, acks_late or not.

Configured from the environment so the plain and the guarded worker of a cell differ in one
thing, ``install(app)``: ``RATE_BROKER`` (the broker URL), ``DURABLE_BEAT_URL`` (the store, read
by the product), ``RATE_QUEUE`` (the queue, one per run), ``GUARD`` (``1``: ``install(app)``),
``ACKS_LATE`` (``1``: the task acknowledges after it ran), ``TICKS_FILE`` (one short line per run:
the bench's clock), ``TASK_MS`` (how long each run waits before it writes that line, as a task
waiting on a database or an HTTP call would: 0, a no-op, unless set). Everything else is
Celery's default (prefetch multiplier 4, no result backend).
"""

from __future__ import annotations

import os
import time
from typing import Any

from celery import Celery

from celery_durable_beat import install

app = Celery("rate", broker=os.environ["RATE_BROKER"], set_as_current=True)
app.conf.update(
    task_ignore_result=True,
    task_default_queue=os.environ.get("RATE_QUEUE", "celery"),
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)
if os.environ.get("GUARD") == "1":
    install(app)
    if os.environ.get("GUARD_PREFETCH"):
        app.conf.worker_prefetch_multiplier = int(os.environ["GUARD_PREFETCH"])

_TICKS = os.environ.get("TICKS_FILE", "")
_WAIT_S = float(os.environ.get("TASK_MS", "0")) / 1000


@app.task(name="rate.tick", bind=True, acks_late=os.environ.get("ACKS_LATE") == "1")
def tick(self: Any) -> None:
    """One run: a timestamp appended with one ``O_APPEND`` write (lines never interleave)."""
    if _WAIT_S:
        time.sleep(_WAIT_S)
    fd = os.open(_TICKS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{time.time():.6f}\n".encode())
    finally:
        os.close(fd)
