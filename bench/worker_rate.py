"""Ticks a second that two workers run, with ``install(app)`` and without, in the same run.

The guard costs each tick a claim and a settle in Redis and its run states in the store; this
measures what that leaves of a plain Celery worker's rate, so the soak's size (and a user's
sizing) rests on a figure. Each pair runs both variants back to back on a fresh store and an
empty broker database: N tick messages (the headers beat sends) are published first, then two
workers of ``tests/support/procapp.py`` (``late_record``: ``acks_late``, one short line a run)
drain them; the rate is taken over the middle 80 % of the runs, so worker start-up is left out.

    .venv/bin/python bench/worker_rate.py            # prefork:2, 3,000 ticks, 3 pairs
    .venv/bin/python bench/worker_rate.py --pool solo:1 --pool threads:8 --pairs 5

PostgreSQL and Redis come from ``DURABLE_BEAT_TEST_PG`` / ``DURABLE_BEAT_TEST_REDIS`` (as in the
tests; the Redis database is flushed).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis
from celery import Celery
from pgdb import drop_db, make_db

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from celery_durable_beat import tick_task_id  # noqa: E402
from tests.support.rig import ensure_schema, tick_headers  # noqa: E402

PG = os.environ.get("DURABLE_BEAT_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("DURABLE_BEAT_TEST_REDIS", "redis://127.0.0.1:6379/14")
T0 = 1_800_000_000_000
CELERY_WORKER = [
    sys.executable,
    "-m",
    "celery",
    "-A",
    "tests.support.procapp",
    "worker",
    "-l",
    "WARNING",
]


def publish(broker: str, count: int) -> None:
    app = Celery("bench-sender", broker=broker, set_as_current=False)
    with app.producer_or_acquire() as producer:
        for i in range(count):
            name, tick = f"rate-{i % 100:03d}", T0 + i * 1000
            app.send_task(
                "procapp.late_record",
                task_id=tick_task_id(name, tick),
                headers=tick_headers(name, tick),
                producer=producer,
            )
    app.close()


def lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def one_run(pool: str, guard: bool, count: int, workdir: Path) -> float:
    """Ticks a second over the middle 80 % of ``count`` runs by two workers."""
    store = make_db(PG)
    client = redis.Redis.from_url(REDIS)
    client.flushdb()
    ensure_schema(store)
    ticks = workdir / f"ticks-{pool}-{guard}-{time.monotonic_ns()}.jsonl"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "BEAT_BROKER": REDIS,
        "BEAT_LEASE_URL": REDIS,
        "DURABLE_BEAT_URL": store,
        "TICKS_FILE": str(ticks),
        "GUARD": "1" if guard else "0",
    }
    name, _, concurrency = pool.partition(":")
    publish(REDIS, count)
    workers = [
        subprocess.Popen(
            [*CELERY_WORKER, "-P", name, "-c", concurrency or "1", "-n", f"rate{n}@%h"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for n in range(2)
    ]
    try:
        deadline = time.monotonic() + 600
        while lines(ticks) < count:
            if time.monotonic() > deadline:
                raise SystemExit(f"{pool} guard={guard}: {lines(ticks)} of {count} in 600 s")
            time.sleep(0.2)  # a poll of the evidence file, on a deadline
    finally:
        for proc in workers:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        client.close()
        drop_db(PG, store)
    times = sorted(json.loads(line)["t"] for line in ticks.read_text().splitlines())
    skip = count // 10
    return (count - 2 * skip) / (times[-skip - 1] - times[skip])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pool", action="append", help="pool:concurrency (prefork:2)")
    parser.add_argument("--ticks", type=int, default=3000)
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    print(f"load {os.getloadavg()[0]:.2f}, {args.ticks} ticks, two workers, Redis broker")
    print("| pool | plain Celery (ticks/s) | with install(app) (ticks/s) | ratio |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for pool in args.pool or ["prefork:2"]:
            plain, guarded = [], []
            for _ in range(args.pairs):
                plain.append(one_run(pool, False, args.ticks, Path(tmp)))
                guarded.append(one_run(pool, True, args.ticks, Path(tmp)))
            ratios = [g / p for p, g in zip(plain, guarded, strict=True)]
            print(
                f"| {pool} | {statistics.median(plain):.0f} | {statistics.median(guarded):.0f} "
                f"| {statistics.median(ratios):.2f} |"
            )
    print(f"load {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
