"""One warm-shutdown trial: a prefork worker draining ticks gets SIGTERM; what its exit left.

Shared by ``bench/warm_shutdown.py`` (the before/after table) and
``tests/reliability/test_warm_shutdown.py`` (SPEC §6: a guarded worker ends within 5 s after its
running tasks finish and leaves no message of a tick that ran unacknowledged).

A trial: the broker's Redis database is flushed, ``ticks`` tick messages (beat's ``periodic_*``
headers and tick task ids) of ``ws.tick`` (``tests/support/shutdown_app.py``: ``acks_late``,
20 ms) are published, a ``celery worker -P prefork -c 2 -l WARNING`` (Celery's defaults
otherwise) drains them, and once ``term_after`` of them have run it gets SIGTERM. Measured:
seconds from SIGTERM to the process's exit, seconds from the last task's end (the latest instant
in ``ws:ran``) to the exit, and the ids that ran yet are still in kombu's queue list or its
``unacked`` hash after the exit (kombu gives unacked messages back to the list when the channel
closes, or after the visibility timeout: either way the broker delivers them again).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from celery import Celery

from celery_durable_beat import tick_task_id
from tests.support.rig import tick_headers

REPO = Path(__file__).resolve().parents[2]
QUEUE = "celery"
UNACKED = "unacked"
RAN_KEY = "ws:ran"
T0 = 1_800_000_000_000
WORKER = (sys.executable, "-m", "celery")
EXIT_DEADLINE = 90.0
"""A worker still running this long after SIGTERM is SIGKILLed and the trial says so."""


@dataclass(frozen=True)
class Trial:
    """What one SIGTERM left."""

    guarded: bool
    term_after: int
    exit_s: float
    """SIGTERM to the worker's exit."""
    after_last_end_s: float
    """The last task's end to the worker's exit."""
    ran: int
    ran_unacked: int
    """Messages whose task ran, still in the queue or the unacked hash after the exit."""
    exitcode: int | None
    """None: SIGKILLed at ``EXIT_DEADLINE``."""

    def as_row(self) -> dict[str, Any]:
        return {
            "guarded": self.guarded,
            "term_after": self.term_after,
            "exit_s": round(self.exit_s, 3),
            "after_last_end_s": round(self.after_last_end_s, 3),
            "ran": self.ran,
            "ran_unacked": self.ran_unacked,
            "exitcode": self.exitcode,
        }


def publish(broker: str, count: int, tick0: int = T0) -> None:
    app = Celery("ws-sender", broker=broker, set_as_current=False)
    with app.producer_or_acquire() as producer:
        for i in range(count):
            name, tick = f"ws-{i % 50:02d}", tick0 + i * 1000
            app.send_task(
                "ws.tick",
                task_id=tick_task_id(name, tick),
                headers=tick_headers(name, tick),
                producer=producer,
            )
    app.close()


def _message_id(raw: bytes) -> str | None:
    try:
        return str(json.loads(raw)["headers"]["id"])
    except (ValueError, KeyError, TypeError):
        return None


def left_in_broker(client: Any) -> set[str]:
    """Ids of the messages in the queue list and in kombu's unacked hash."""
    found = {_message_id(raw) for raw in client.lrange(QUEUE, 0, -1)}
    for raw in client.hvals(UNACKED):
        try:
            found.add(_message_id(json.dumps(json.loads(raw)[0]).encode()))
        except (ValueError, IndexError, TypeError):
            continue
    found.discard(None)
    return {i for i in found if i is not None}


def _wait(check: Any, timeout: float, what: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if proc.poll() is not None:
            raise RuntimeError(f"worker exited ({proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.01)  # a deadline poll of Redis


def run_trial(
    broker: str,
    *,
    guarded: bool,
    term_after: int,
    ticks: int = 1000,
    store: str | None = None,
    log: Path | None = None,
    app: str = "tests.support.shutdown_app",
    tick0: int = T0,
) -> Trial:
    """One trial on ``broker`` (a Redis URL whose database is flushed first); ``tick0``: the
    first tick's instant (trials sharing one store need ticks of their own)."""
    client = redis.Redis.from_url(broker)
    client.flushdb()
    publish(broker, ticks, tick0)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "WS_BROKER": broker,
        "WS_GUARD": "1" if guarded else "0",
        "WS_STORE": store or "",
    }
    out = log.open("ab") if log else subprocess.DEVNULL
    proc = subprocess.Popen(
        [*WORKER, "-A", app, "worker", "-P", "prefork", "-c", "2", "-l", "WARNING", "-n", "ws@%h"],
        cwd=REPO,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        _wait(lambda: client.zcard(RAN_KEY) >= term_after, 120, f"{term_after} runs", proc)
        sent = time.time()
        proc.send_signal(signal.SIGTERM)
        try:
            exitcode: int | None = proc.wait(timeout=EXIT_DEADLINE)
        except subprocess.TimeoutExpired:
            exitcode = None
        exited = time.time()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        else:  # pool processes orphaned by a main process that died first
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        if log:
            out.close()  # type: ignore[union-attr]
    ran = {k.decode(): s for k, s in client.zrange(RAN_KEY, 0, -1, withscores=True)}
    unacked = set(ran) & left_in_broker(client)
    client.close()
    return Trial(
        guarded=guarded,
        term_after=term_after,
        exit_s=exited - sent,
        after_last_end_s=exited - max(ran.values()),
        ran=len(ran),
        ran_unacked=len(unacked),
        exitcode=exitcode,
    )
