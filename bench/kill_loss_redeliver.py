"""``broker_kill_loss.py --redeliver S``: the same kills, the ticks beat-recorded, redelivery on.

The messages are ticks of one schedule (named as the run's queue, ``kloss-<hex>``, so no claim a
previous run left in Redis refuses them; task ``kloss.record``): each published with
its tick id and ``periodic_*`` headers, and recorded ``enqueued`` in a store of its own (a fresh
PostgreSQL database) as a round records it, watched from ``S`` seconds later. The workers run
``install(app)`` (claims in Redis, run states in the store). The driver runs the leader's
redelivery sweep (``redelivery_sweep.RedeliverySweep``, with the Redis probe) on a thread every
half second, under a registered epoch, exactly as beat's loop calls it. The figure that matters
is then ``lost``: tick ids never run, each lost message having had to be sent again.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.message import tick_headers
from celery_durable_beat.model import Definition, Outcome, Source, Trigger
from celery_durable_beat.schedules.spec import IntervalSpec
from celery_durable_beat.store.base import AuditEvent

BASE_MS = 1_800_000_000_000
EPOCH = 1


class Redelivering:
    """The store, the schedule, the recorded publishes and the sweep thread of one run."""

    def __init__(self, queue: str, after_s: float, store_url: str) -> None:
        from broker_kill_app import TASK_NAME, app

        from celery_durable_beat.backends import make_publisher
        from celery_durable_beat.gates.live_queues import QueueRouter
        from celery_durable_beat.publish.redis_probe import RedisProbe
        from celery_durable_beat.redelivery import RedeliveryPolicy
        from celery_durable_beat.redelivery_sweep import RedeliverySweep
        from celery_durable_beat.runs.factory import make_runs
        from celery_durable_beat.settings import Settings
        from celery_durable_beat.store.sql import SqlStore

        self.app, self.task = app, TASK_NAME
        # The run's own schedule (its queue's name), so its task ids are its own: the claims a
        # previous run left in the broker's Redis (kept ``durable_beat_dedup_ttl``) would refuse
        # the same ids as duplicates.
        self.schedule = queue
        self.after_ms = round(after_s * 1000)
        self.store = SqlStore(store_url)
        self.store.ensure_schema()
        self.store.register_epoch(EPOCH)
        definition = _definition(self.schedule, TASK_NAME)
        self.store.upsert(definition, Source.API, None, self.store.now_ms())
        self.version = 1
        settings = Settings.from_conf(app.conf)
        self.runs = make_runs(app, settings, store_url)
        self.sweep = RedeliverySweep(
            self.store,
            make_publisher(app, settings),
            self.runs,
            RedeliveryPolicy(self.after_ms, settings.redeliver_max),
            queue_of=QueueRouter(app),
            probe=RedisProbe(app),
        )
        self.redelivered = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def publish(self, first: int, count: int) -> list[str]:
        """Publish ticks ``first``..``first+count-1``, then record them ``enqueued``."""
        ticks = [BASE_MS + i * 1000 for i in range(first, first + count)]
        ids = [tick_task_id(self.schedule, t) for t in ticks]
        from celery_durable_beat.message import build_message

        with self.app.producer_or_acquire() as producer:
            for tick, task_id in zip(ticks, ids, strict=True):
                definition = _definition(self.schedule, self.task)
                message = build_message(self.schedule, definition, tick, task_id)
                self.app.send_task(
                    self.task, task_id=task_id, headers=tick_headers(message), producer=producer
                )
        recheck = self.store.now_ms() + self.after_ms
        events = [
            AuditEvent(
                self.schedule, t, i, Trigger.AUTO, Outcome.ENQUEUED, version=1, recheck_ms=recheck
            )
            for t, i in zip(ticks, ids, strict=True)
        ]
        for start in range(0, len(events), 5000):
            self.store.settle(events[start : start + 5000], (), EPOCH)
        return ids

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.redelivered += len(self.sweep.maybe_sweep(self.store.now_ms(), EPOCH))
            except Exception as exc:  # the bench goes on; the figure says what it did
                print(f"  sweep failed: {exc!r}", flush=True)

    def facts(self) -> dict[str, Any]:
        return {"redeliver_after_s": self.after_ms / 1000, "redelivered": self.redelivered}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sweep.close()
        self.runs.close()
        self.store.close()


def _definition(schedule: str, task: str) -> Definition:
    return Definition(name=schedule, task=task, spec=IntervalSpec(1000))


def configure(env: dict[str, str], store_url: str, claims_url: str) -> None:
    """The environment every worker (and this process's app) reads for ``--redeliver``."""
    env.update(KLOSS_STORE=store_url, KLOSS_CLAIMS=claims_url)
    os.environ.update(KLOSS_STORE=store_url, KLOSS_CLAIMS=claims_url)


def wait_quiet(check: Any, seconds: float) -> None:
    """Until ``check()`` holds or ``seconds`` pass (a deadline poll)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not check():
        time.sleep(0.5)
