"""The one process rig: real ``celery beat`` and ``celery worker`` processes running
``tests/support/procapp.py`` on a store and a Redis broker, and how to read what they did.

Settings are the test app's (``app_env``): given to the rig, they apply to every process it
starts; given to ``worker`` or ``beat``, to that process only. Every wait is a deadline poll
(``wait_until``, ``CeleryProcess.wait_for`` / ``wait_action``), never a sleep.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, closing, contextmanager
from pathlib import Path
from typing import Any, TypeVar

from celery import Celery

from celery_durable_beat import install
from celery_durable_beat.runs.base import RunState
from celery_durable_beat.runs.sql import SqlRunStore
from celery_durable_beat.store.sql import SqlStore
from celery_durable_beat.worker import shared_counters
from tests.support.procs import CeleryProcess, read_jsonl, wait_until

R = TypeVar("R")

APP_MODULE = "tests.support.procapp"
SETTINGS = {
    "schedule": "BEAT_SCHEDULE",
    "guard": "GUARD",
    "lease_url": "BEAT_LEASE_URL",
    "lease_options": "BEAT_LEASE_OPTIONS",
    "lease_ttl": "BEAT_LEASE_TTL",
    "poll": "BEAT_POLL",
    "run_ttl": "GUARD_RUN_TTL",
    "visibility_timeout": "VISIBILITY_TIMEOUT",
    "fault": "BEAT_FAULT",
    "quarantine_after": "QUARANTINE_AFTER",
    "sentry_envelopes": "SENTRY_ENVELOPES",
    "otel_spans": "OTEL_SPANS",
    "metrics_port": "METRICS_PORT",
    "liveness_s": "LIVENESS_S",
    "result_backend": "RESULT_BACKEND",
    "queue": "TASK_QUEUE",
    "timezone": "BEAT_TIMEZONE",
    "routes": "TASK_ROUTES",
    "worker_ttl": "WORKER_TTL",
    "history_keep": "HISTORY_KEEP",
    "store_url": "DURABLE_BEAT_URL",
    "broker": "BEAT_BROKER",
    "redeliver_after": "REDELIVER_AFTER",
    "batch_size": "BEAT_BATCH_SIZE",
    "namespace": "BEAT_NAMESPACE",
    "app_main": "APP_MAIN",
    "hooks_file": "HOOKS_FILE",
    "slack_webhook": "SLACK_WEBHOOK_URL",
}
"""Test app setting -> the environment variable ``procapp`` reads it from."""

WORKER_FLAGS = ["-l", "info", "--without-mingle", "--without-gossip", "--without-heartbeat"]
BEAT_ARGS = ["beat", "-S", "celery_durable_beat.Scheduler", "-l", "info", "--pidfile="]


def app_env(settings: Mapping[str, object]) -> dict[str, str]:
    """The environment that gives ``procapp`` these settings; an unknown name is a test bug."""
    env: dict[str, str] = {}
    for name, value in settings.items():
        if name not in SETTINGS:
            raise TypeError(f"unknown test app setting {name!r}; known: {sorted(SETTINGS)}")
        if isinstance(value, bool):
            text = "1" if value else "0"
        elif isinstance(value, dict):
            text = json.dumps(value)
        else:
            text = "" if value is None else str(value)
        env[SETTINGS[name]] = text
    return env


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


class ProcessRig:
    """A workdir, the test app's settings, and the worker and beat processes started on demand."""

    def __init__(self, workdir: Path, store_url: str, broker_url: str, **settings: object) -> None:
        self.workdir = workdir
        self.store_url = store_url
        self.broker_url = broker_url
        self.ticks_file = workdir / "ticks.jsonl"
        self.env = {
            "BEAT_BROKER": broker_url,
            "DURABLE_BEAT_URL": store_url,
            "TICKS_FILE": str(self.ticks_file),
            "RECEIPTS_FILE": str(workdir / "receipts.jsonl"),
            "SIGNALS_FILE": str(workdir / "signals.jsonl"),
            **app_env(settings),
        }
        self.procs: list[CeleryProcess] = []
        self.beats: list[CeleryProcess] = []
        self._redis: Any = None
        ensure_schema(store_url)  # so the evidence can be read before any beat has started

    # -- processes ------------------------------------------------------------------------------
    def worker(
        self,
        pool: str = "solo",
        concurrency: int = 1,
        *,
        ready: bool = True,
        flags: Sequence[str] = (),
        **settings: object,
    ) -> CeleryProcess:
        """A worker; ``ready=False`` returns at once (the broker keeps the ticks until it
        consumes), so beats can start while it boots. ``flags`` go to ``celery worker`` too
        (``["-E"]``: send task events)."""
        # A node name of its own: RabbitMQ's pidbox queue is exclusive per name, so a worker of
        # another test (or one left over from an aborted run) never blocks this one's start.
        node = f"w{len(self.procs)}-{uuid.uuid4().hex[:8]}@%h"
        args = ["worker", "-P", pool, "-c", str(concurrency), "-n", node, *WORKER_FLAGS, *flags]
        proc = self._start(args, "worker", settings)
        if ready:
            proc.wait_for("ready.", 30)
        return proc

    def beat(self, name: str = "beat", **settings: object) -> CeleryProcess:
        proc = self._start(BEAT_ARGS, name, settings)
        self.beats.append(proc)
        return proc

    def celery(
        self, args: list[str], name: str, env: Mapping[str, str] | None = None, **settings: object
    ) -> CeleryProcess:
        """Any other ``celery -A <test app>`` process (``flower``, ``events``, ...) on the rig's
        settings, with ``env`` added to its environment; closed with the rig."""
        return self._start(args, name, settings, env)

    def _start(
        self,
        args: list[str],
        name: str,
        settings: Mapping[str, object],
        extra_env: Mapping[str, str] | None = None,
    ) -> CeleryProcess:
        env = {**self.env, **app_env(settings), **(extra_env or {})}
        proc = CeleryProcess(self.workdir, APP_MODULE, args, env, f"{name}-{len(self.procs)}")
        self.procs.append(proc)
        return proc

    def assert_all_alive(self) -> None:
        for proc in self.procs:
            assert proc.alive(), f"exited: {proc.tail()}"

    def close(self) -> None:
        for proc in self.procs:
            proc.close()
        if self._redis is not None:
            self._redis.close()
        if self.broker_url.startswith("amqp") and "TASK_QUEUE" in self.env:
            from kombu import Connection, Queue

            with Connection(self.broker_url) as conn:  # a RabbitMQ queue outlives the test
                Queue(self.queue)(conn.default_channel).delete()

    # -- the broker -----------------------------------------------------------------------------
    @property
    def redis(self) -> Any:
        """A client of the broker's Redis."""
        if self._redis is None:
            import redis

            self._redis = redis.Redis.from_url(self.broker_url)
        return self._redis

    def send(
        self,
        task: str,
        task_id: str | None,
        headers: dict[str, Any] | None,
        args: tuple[Any, ...] = (),
        **options: Any,
    ) -> None:
        app = Celery("sender", broker=self.broker_url, set_as_current=False)
        app.conf.task_default_queue = self.queue
        try:
            app.send_task(task, args=args, task_id=task_id, headers=headers, **options)
        finally:
            app.close()

    @property
    def queue(self) -> str:
        """The queue the test app's tasks go to (setting ``queue``; Celery's default)."""
        return self.env.get("TASK_QUEUE") or "celery"

    def drained(self) -> bool:
        if self.broker_url.startswith("amqp"):
            return self._amqp_ready() == 0
        return self.redis.llen("celery") == 0 and self.redis.hlen("unacked") == 0

    def queued(self) -> int:
        """Messages waiting in the broker's queue, not yet delivered to a worker (none while
        nobody has declared the queue yet)."""
        if self.broker_url.startswith("amqp"):
            from amqp.exceptions import NotFound

            try:
                return self._amqp_ready()
            except NotFound:
                return 0
        return int(self.redis.llen(self.queue))

    def _amqp_ready(self) -> int:
        """Messages ready in the RabbitMQ queue (those a worker holds unacked are not counted:
        callers also wait until the worker's rows stop changing)."""
        from kombu import Connection

        with Connection(self.broker_url) as conn:
            _, ready, _ = conn.default_channel.queue_declare(queue=self.queue, passive=True)
        return int(ready)

    # -- evidence -------------------------------------------------------------------------------
    def rows(self, event: str | None = None) -> list[dict[str, Any]]:
        """What the tasks did (TICKS_FILE), oldest first; one ``event`` only, if named."""
        rows = read_jsonl(self.ticks_file)
        return [r for r in rows if event is None or r.get("event") == event]

    def receipts(self) -> list[dict[str, Any]]:
        return read_jsonl(Path(self.env["RECEIPTS_FILE"]))

    def signals(self, name: str) -> list[dict[str, Any]]:
        """The ``task_prerun`` / ``task_postrun`` signals the worker's tasks sent, oldest first."""
        rows = read_jsonl(Path(self.env["SIGNALS_FILE"]))
        return [r for r in rows if r.get("signal") == name]

    def state(self, task_id: str) -> RunState | None:
        return run_row(self.store_url, task_id)

    def shared_counters(self) -> dict[str, int]:
        """The guard's counters every worker adds to (in Redis)."""
        app = Celery("reader", broker=self.broker_url, set_as_current=False)
        app.conf.durable_beat_url = self.store_url
        if self.env.get("BEAT_LEASE_URL"):  # claims live where the processes keep them
            app.conf.durable_beat_lease_url = self.env["BEAT_LEASE_URL"]
        if self.env.get("BEAT_LEASE_OPTIONS"):
            app.conf.durable_beat_lease_transport_options = json.loads(
                self.env["BEAT_LEASE_OPTIONS"]
            )
        install(app)
        return shared_counters(app)

    def history(self, name: str) -> list[Any]:
        """The schedule's last 100 audit records, newest first."""
        store = SqlStore(self.store_url)
        try:
            return store.history(name, 100)
        finally:
            store.close()

    def wait_rows(self, count: int, timeout: float, event: str | None = None) -> list[Any]:
        """Until the tasks have written ``count`` rows (of ``event``, if named); those rows."""
        return wait_until(
            lambda: len(rows := self.rows(event)) >= count and rows,
            timeout,
            f"{count} task rows ({event or 'any event'})",
        )


@contextmanager
def rig_factory(tmp_path: Path, make: Callable[..., R]) -> Iterator[Callable[..., R]]:
    """``make(workdir, *args, **kwargs)`` on demand, each in a folder of its own; every rig
    made is closed (its processes killed) when the block ends."""
    with ExitStack() as stack:

        def made(*args: Any, **kwargs: Any) -> R:
            workdir = tmp_path / f"rig-{uuid.uuid4().hex[:6]}"
            workdir.mkdir()
            rig = make(workdir, *args, **kwargs)
            stack.enter_context(closing(rig))  # type: ignore[type-var]
            return rig

        yield made
