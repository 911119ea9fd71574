"""Leader handover with real ``celery beat`` processes: SIGTERM and kill -9, on both leases.

Run from the repository root (PostgreSQL and redis-server as for the tests)::

    python bench/bench_handover.py                  # 20 trials of each kind, both backends
    python bench/bench_handover.py --trials 3       # a quick look
    python bench/bench_handover.py --backends store --kinds sigterm

Each trial runs two beats on one store, a ``@every:100`` schedule (a tick every 100 ms, so the
first tick after a handover is never more than 100 ms away) and the product's default poll
interval of 1 s (``--poll``). Once the standby has logged that it stands by, the leader gets:

- ``sigterm``: SIGTERM with the default 30 s TTL. Measured: from the signal to the first
  ``enqueued`` audit record written under the new leader's epoch. The old leader releases its lease
  on the way out, so this is about one standby poll, not the TTL.
- ``kill``: SIGKILL with a 5 s TTL (``--kill-ttl``). Measured the same way, from the kill; the
  lease has to expire first, so this is about the TTL.

The signal goes out at a random moment (uniform over one poll interval, seeded) after the standby
is warm: a signal sent right after the standby's first round would always wait a whole poll, and
one sent right before it never would. The record's ``recorded_at_ms`` is PostgreSQL's clock, on
this host, so it compares with the host's clock at the signal. The killed or stopped beat is
replaced by a fresh one, which must be standing by before the next trial starts. The broker is a
redis-server of the bench's own; nothing consumes the ticks (the queue is emptied between trials).
Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
import redis
from sqlalchemy import create_engine, func, select

from celery_durable_beat.store.sql import SqlStore
from celery_durable_beat.store.tables import audit

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # the process helpers of the tests (tests/support/)
    sys.path.insert(0, str(REPO))
from tests.support.procs import CeleryProcess, ThrowawayRedis, wait_until  # noqa: E402
from tests.support.rig import APP_MODULE  # noqa: E402

PG = os.environ.get("DURABLE_BEAT_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
SCHEDULE = {"h": {"task": "procapp.record", "schedule": "@every:100", "missed": "skip"}}


class Bench:
    """Two beats of one backend, replaced as trials take them down."""

    def __init__(self, backend: str, ttl: float, poll: float, broker: str, store_url: str) -> None:
        self.poll = poll
        self.random = random.Random(f"{backend}-{ttl}-{poll}")
        self.workdir = Path(tempfile.mkdtemp(prefix="handover-"))
        self.env = {
            "BEAT_BROKER": broker,
            "DURABLE_BEAT_URL": store_url,
            "BEAT_SCHEDULE": json.dumps(SCHEDULE),
            "TICKS_FILE": str(self.workdir / "ticks.jsonl"),
            "BEAT_LEASE_TTL": str(ttl),
            "BEAT_POLL": str(poll),
            "BEAT_LEASE_URL": broker if backend == "redis" else "",
            "GUARD": "0",
        }
        self.broker = redis.Redis.from_url(broker)
        self.engine = create_engine(store_url)
        self.beats: list[CeleryProcess] = []
        self.started = 0

    def start_beat(self) -> CeleryProcess:
        self.started += 1
        args = ["beat", "-S", "celery_durable_beat.Scheduler", "-l", "info", "--pidfile="]
        beat = CeleryProcess(self.workdir, APP_MODULE, args, self.env, f"beat-{self.started}")
        self.beats.append(beat)
        return beat

    def newest_epoch(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.coalesce(func.max(audit.c.epoch), 0))).scalar())

    def first_recorded_after(self, epoch: int) -> int | None:
        query = select(func.min(audit.c.recorded_at_ms)).where(
            audit.c.epoch > epoch, audit.c.outcome == "enqueued"
        )
        with self.engine.connect() as conn:
            value = conn.execute(query).scalar()
        return None if value is None else int(value)

    def leader_and_standby(self) -> tuple[CeleryProcess, CeleryProcess] | None:
        """The beat that logged the newest gain, and a running one that stands by."""
        alive = [b for b in self.beats if b.proc.poll() is None]
        epoch = self.newest_epoch()
        if epoch == 0:
            return None
        gained = f"leadership gained (epoch {epoch})"
        leaders = [b for b in alive if gained in b.output()]
        standbys = [b for b in alive if b not in leaders and "standing by" in b.output()]
        if len(leaders) != 1 or not standbys:
            return None
        return leaders[0], standbys[0]

    def trial(self, sig: int, timeout: float) -> float:
        leader, _ = wait_until(self.leader_and_standby, 60, "a leader and a warm standby")
        old_epoch = self.newest_epoch()
        wait_until(lambda: self.first_recorded_after(old_epoch - 1), 10, "the leader to dispatch")
        self.broker.delete("celery")
        time.sleep(self.random.uniform(0, self.poll))  # a random phase of the standby's polling
        sent_at_ms = time.time_ns() // 1_000_000
        os.kill(leader.proc.pid, sig)
        first = wait_until(lambda: self.first_recorded_after(old_epoch), timeout, "a new leader")
        leader.proc.wait(timeout=30)
        self.beats.remove(leader)
        leader.close()
        self.start_beat()
        return float(first - sent_at_ms)

    def close(self) -> None:
        for beat in self.beats:
            beat.close()
        self.broker.close()
        self.engine.dispose()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _database(admin_url: str) -> tuple[str, str]:
    name = f"bench_handover_{uuid.uuid4().hex[:8]}"
    dsn = admin_url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')  # a name generated here, not input
    return name, f"{admin_url.rpartition('/')[0]}/{name}"


def _drop(admin_url: str, name: str) -> None:
    dsn = admin_url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run(backend: str, kind: str, trials: int, ttl: float, poll: float) -> dict[str, Any]:
    broker = ThrowawayRedis()
    broker.start()
    name, url = _database(PG)
    store = SqlStore(url)
    store.ensure_schema()  # so the bench can read the audit table before any beat has started
    store.close()
    bench = Bench(backend, ttl, poll, broker.url, url)
    samples: list[float] = []
    try:
        bench.start_beat()
        bench.start_beat()
        sig = signal.SIGTERM if kind == "sigterm" else signal.SIGKILL
        for number in range(1, trials + 1):
            samples.append(bench.trial(sig, ttl + 30))
            print(f"  {backend:5} {kind:7} trial {number:2}: {samples[-1]:6.0f} ms", flush=True)
    finally:
        bench.close()
        _drop(PG, name)
        broker.close()
    return {
        "backend": backend,
        "kind": kind,
        "ttl_s": ttl,
        "poll_interval_s": poll,
        "trials": len(samples),
        "median_ms": statistics.median(samples),
        "max_ms": max(samples),
        "min_ms": min(samples),
        "samples_ms": samples,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--backends", default="store,redis")
    parser.add_argument("--kinds", default="sigterm,kill")
    parser.add_argument("--poll", type=float, default=1.0, help="durable_beat_poll_interval")
    parser.add_argument("--kill-ttl", type=float, default=5.0)
    parser.add_argument("--sigterm-ttl", type=float, default=30.0)
    options = parser.parse_args(argv)
    results = []
    for backend in options.backends.split(","):
        for kind in options.kinds.split(","):
            ttl = options.kill_ttl if kind == "kill" else options.sigterm_ttl
            results.append(run(backend, kind, options.trials, ttl, options.poll))
    print()
    head = ("lease", "handover", "ttl", "trials", "median", "max", "min")
    print("{:6} {:9} {:>5} {:>6} {:>9} {:>9} {:>9}".format(*head))
    for r in results:
        print(
            f"{r['backend']:6} {r['kind']:9} {r['ttl_s']:4g}s {r['trials']:6} "
            f"{r['median_ms']:7.0f}ms {r['max_ms']:7.0f}ms {r['min_ms']:7.0f}ms"
        )
    print(json.dumps({"bench": "handover", "poll_interval_s": options.poll, "results": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
