"""The worker app of the warm-shutdown trials (``tests/support/shutdown_trial.py``).

Celery's defaults except the broker (Redis, ``WS_BROKER``) and, with ``WS_GUARD=1``,
``install(app)`` with claims in Redis (the broker's server) and run states in ``WS_STORE``. One
task, ``ws.tick``: ``acks_late``, 20 ms of work (``WS_TASK_SECONDS``), then its id and the
instant it ended go to the sorted set ``ws:ran`` on the broker's Redis: the evidence of which
messages ran, which the driver compares with what is left in kombu's queue and unacked hash.
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis
from celery import Celery

from celery_durable_beat import install

RAN_KEY = "ws:ran"

app = Celery("warm_shutdown", broker=os.environ["WS_BROKER"])
app.conf.update(task_ignore_result=True, worker_hijack_root_logger=False)
if os.environ.get("WS_GUARD") == "1":
    app.conf.update(
        durable_beat_url=os.environ["WS_STORE"], durable_beat_lease_url=os.environ["WS_BROKER"]
    )
    install(app)

_SECONDS = float(os.environ.get("WS_TASK_SECONDS", "0.02"))
_client: dict[int, Any] = {}


def _redis() -> Any:
    pid = os.getpid()  # one connection per pool process, never the parent's
    if pid not in _client:
        _client[pid] = redis.Redis.from_url(os.environ["WS_BROKER"])
    return _client[pid]


@app.task(name="ws.tick", bind=True, acks_late=True)
def tick(self: Any) -> None:
    time.sleep(_SECONDS)
    _redis().zadd(RAN_KEY, {str(self.request.id): time.time()})
