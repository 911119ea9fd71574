"""The Celery app that ``bench/broker_kill_loss.py`` runs plain workers on.

Nothing from celery_durable_beat (unless ``KLOSS_STORE`` is set, below): one ``acks_late`` task that
appends its own task id to a file, one line per execution, with a single unbuffered ``O_APPEND``
write (atomic for a line this short, and in the page cache before the task returns, so a SIGKILL of
the worker after the task ran cannot lose the line). The driver and every worker it spawns read the
same environment, so they agree on the broker, queue, output file and visibility timeout:

``KLOSS_BROKER``  broker URL (Redis database 11 by default, or ``amqp://...``)
``KLOSS_QUEUE``   queue name (``kloss-...``)
``KLOSS_OUT``     file the task appends its id to
``KLOSS_VT``      Redis ``visibility_timeout`` in seconds
``KLOSS_STORE``   set (``--redeliver``): the durable beat store the ticks are recorded in; the
                  workers then run ``install(app)`` (claims in ``KLOSS_CLAIMS``, a Redis URL)
``KLOSS_RUN_TTL`` with ``KLOSS_STORE``: ``durable_beat_run_ttl`` in seconds (10 by default
                  here). A message whose run a kill cut is given back by Redis after the
                  visibility timeout and waits out that run's claim (guarantee 3 of
                  docs/worker.md) in a pool process; with the default 60 s, two of them stall a
                  ``-c 2`` worker for a minute, which the driver takes for an idle start.

On Redis the transport keeps its unacked hash, index and restore mutex under keys derived
from the queue name, so a run sees only its own messages. The restore sweep runs every 2 s
with no throttle (kombu's default sweep is 10 s x a throttle of 10), and the restore mutex
expires after 5 s instead of 300 s, so that a worker SIGKILLed while holding it does not
block every later restore for five minutes.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery, Task

BROKER = os.environ.get("KLOSS_BROKER", "redis://127.0.0.1:6379/11")
QUEUE = os.environ.get("KLOSS_QUEUE", "kloss-default")
OUT = os.environ.get("KLOSS_OUT", "/tmp/kloss-default.ids")
VISIBILITY_TIMEOUT = float(os.environ.get("KLOSS_VT", "10"))
TASK_NAME = "kloss.record"


def redis_transport_options(queue: str, visibility_timeout: float) -> dict[str, Any]:
    """Transport options for a Redis run: short visibility and per-queue unacked keys."""
    return {
        "visibility_timeout": visibility_timeout,
        "unacked_key": f"{queue}-unacked",
        "unacked_index_key": f"{queue}-unacked-index",
        "unacked_mutex_key": f"{queue}-unacked-mutex",
        "unacked_mutex_expire": 5,
        "unacked_restore_interval": 2,
        "unacked_restore_throttle": 1,
    }


app = Celery("broker_kill_app", broker=BROKER)
app.conf.update(
    task_default_queue=QUEUE,
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=True,
    broker_transport_options=(
        redis_transport_options(QUEUE, VISIBILITY_TIMEOUT) if BROKER.startswith("redis") else {}
    ),
)


if os.environ.get("KLOSS_STORE"):  # --redeliver: beat-recorded ticks, guarded workers
    from celery_durable_beat import install

    app.conf.durable_beat_url = os.environ["KLOSS_STORE"]
    app.conf.durable_beat_lease_url = os.environ["KLOSS_CLAIMS"]
    app.conf.durable_beat_run_ttl = float(os.environ.get("KLOSS_RUN_TTL", "10"))
    install(app)


@app.task(name=TASK_NAME, bind=True, acks_late=True)
def record(self: Task) -> None:
    """Append this message's task id to ``OUT``: one write, one line."""
    fd = os.open(OUT, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{self.request.id}\n".encode())
    finally:
        os.close(fd)
