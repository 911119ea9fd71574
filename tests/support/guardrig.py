"""Real ``celery worker`` and ``celery beat`` processes running ``tests/support/guardapp.py``
(``install(app)``), on PostgreSQL and a Redis broker, and how to read what they did."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import redis
from celery import Celery

from celery_durable_beat import install
from celery_durable_beat.runs.base import RunState
from celery_durable_beat.runs.sql import SqlRunStore
from celery_durable_beat.store.sql import SqlStore
from celery_durable_beat.worker import shared_counters
from tests.support.procs import REPO, CeleryProcess, read_jsonl, wait_until


def tick_headers(name: str, tick_ms: int, trigger: str = "auto") -> dict[str, Any]:
    return {"periodic_schedule": name, "periodic_tick_ms": tick_ms, "periodic_trigger": trigger}


def ensure_schema(url: str) -> None:
    store = SqlStore(url)
    store.ensure_schema()
    store.close()


def run_row(url: str, task_id: str) -> RunState | None:
    runs = SqlRunStore(url)
    try:
        record = runs.get_run(task_id)
    finally:
        runs.close()
    return None if record is None else record.state


class Rig:
    """A workdir with tests/support/guardapp.py, real workers and beats started on demand."""

    def __init__(self, tmp: Path, pg_url: str, redis_url: str, **env: str) -> None:
        self.tmp = tmp
        shutil.copy(REPO / "tests" / "support" / "guardapp.py", tmp / "guardapp.py")
        self.ticks_file = tmp / "ticks.jsonl"
        self.pg_url = pg_url
        self.redis = redis.Redis.from_url(redis_url)
        self.env = {
            "BEAT_BROKER": redis_url,
            "DURABLE_BEAT_URL": pg_url,
            "TICKS_FILE": str(self.ticks_file),
            "RECEIPTS_FILE": str(tmp / "rec.jsonl"),
            **env,
        }
        self.procs: list[CeleryProcess] = []
        ensure_schema(pg_url)

    def worker(self, pool: str = "prefork", concurrency: int = 2, **env: str) -> CeleryProcess:
        args = [
            "worker",
            "-P",
            pool,
            "-c",
            str(concurrency),
            "-l",
            "info",
            "--without-mingle",
            "--without-gossip",
            "--without-heartbeat",
        ]
        proc = self._start(args, "worker", env)
        wait_until(lambda: "ready." in proc.output(), 30, "the worker to be ready")
        return proc

    def beat(self, schedule: dict[str, Any], **env: str) -> CeleryProcess:
        args = ["beat", "-S", "celery_durable_beat.Scheduler", "-l", "info", "--pidfile="]
        return self._start(args, "beat", {"BEAT_SCHEDULE": json.dumps(schedule), **env})

    def _start(self, args: list[str], name: str, env: dict[str, str]) -> CeleryProcess:
        proc = CeleryProcess(
            self.tmp, "guardapp", args, {**self.env, **env}, f"{name}-{len(self.procs)}"
        )
        self.procs.append(proc)
        return proc

    def send(
        self,
        task: str,
        task_id: str | None,
        headers: dict[str, Any] | None,
        args: tuple[Any, ...] = (),
        **options: Any,
    ) -> None:
        app = Celery("sender", broker=self.env["BEAT_BROKER"], set_as_current=False)
        try:
            app.send_task(task, args=args, task_id=task_id, headers=headers, **options)
        finally:
            app.close()

    def rows(self, event: str | None = None) -> list[dict[str, Any]]:
        rows = read_jsonl(self.ticks_file)
        return [r for r in rows if event is None or r.get("event") == event]

    def drained(self) -> bool:
        return self.redis.llen("celery") == 0 and self.redis.hlen("unacked") == 0

    def state(self, task_id: str) -> RunState | None:
        return run_row(self.pg_url, task_id)

    def close(self) -> None:
        for proc in self.procs:
            proc.close()
        self.redis.close()

    def shared_counters(self) -> dict[str, int]:
        """The guard's counters every worker adds to (in Redis)."""
        app = Celery("reader", broker=self.env["BEAT_BROKER"], set_as_current=False)
        app.conf.durable_beat_url = self.pg_url
        install(app)
        return shared_counters(app)

    def receipts(self) -> list[dict[str, Any]]:
        return read_jsonl(self.tmp / "rec.jsonl")
