"""The Celery app the process tests run: config from the environment, ticks logged as JSON lines.

Environment: ``BEAT_BROKER``, ``DURABLE_BEAT_URL``, ``BEAT_SCHEDULE`` (JSON of beat_schedule),
``TICKS_FILE`` (where the worker appends one JSON line per executed task), ``BEAT_INSTALL``
(set: the app calls ``install(app)``; unset, every delivery executes, so tests see what beat sent).
"""

from __future__ import annotations

import json
import os
from typing import Any

from celery import Celery

app = Celery("beatapp", broker=os.environ["BEAT_BROKER"])
app.conf.update(
    task_ignore_result=True,
    timezone=os.environ.get("BEAT_TZ", "UTC"),
    beat_schedule=json.loads(os.environ.get("BEAT_SCHEDULE", "{}")),
    durable_beat_poll_interval=float(os.environ.get("BEAT_POLL", "0.2")),
    durable_beat_lease_ttl=float(os.environ.get("BEAT_LEASE_TTL", "30")),
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)
if os.environ.get("BEAT_LEASE_URL"):
    app.conf.durable_beat_lease_url = os.environ["BEAT_LEASE_URL"]
if os.environ.get("BEAT_INSTALL"):
    # The worker side: a tick published twice (kill -9 between publish and audit) runs once.
    from celery_durable_beat import install

    install(app)


@app.task(name="beatapp.record", bind=True)
def record(self: Any, *args: Any, **kwargs: Any) -> None:
    headers = {
        k: getattr(self.request, k, None)
        for k in ("periodic_schedule", "periodic_tick_ms", "periodic_trigger")
    }
    row = {
        "id": self.request.id,
        "args": list(args),
        "kwargs": kwargs,
        "headers": headers,
        "pid": os.getpid(),
    }
    with open(os.environ["TICKS_FILE"], "a") as f:
        f.write(json.dumps(row) + "\n")
