"""Dispatch lag (issue 16, goal 5): how late above its planned instant a tick is recorded.

Two cases, each in a throwaway PostgreSQL database (``pgdb.make_db``), Redis db 15 as the broker
(``DURABLE_BEAT_BENCH_REDIS``), config sync off and rows seeded server-side (``bench_scale``):

1. **idle**: 100 schedules ``@every 1s``; the scheduler runs as ``celery beat`` runs it (call
   ``tick()``, sleep what it returns) for ``--seconds``; the lag of every ``enqueued`` record
   (``lag_ms``: the store's clock at the round minus the tick instant) gives p50 / p99 / max.
2. **burst**: ``--burst`` schedules due at the same instant; ``tick()`` until nothing is due;
   the lag of the last tick is its record's ``recorded_at_ms`` (written when its publish was
   confirmed and audited) minus that instant; and the beat process's own CPU time per tick
   (``time.process_time``: what the other processes of a busy machine do not move much).

    .venv/bin/python bench/lag.py [--seconds 20] [--burst 10000] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time
from typing import Any

import redis
from bench_scale import seed
from celery import Celery
from pgdb import drop_db, make_db

PG = os.environ.get("DURABLE_BEAT_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("DURABLE_BEAT_BENCH_REDIS", "redis://127.0.0.1:6379/15")
QUEUE = "lag-bench"


def scheduler(url: str) -> Any:
    os.environ["DURABLE_BEAT_URL"] = url
    from celery_durable_beat.scheduler import Scheduler

    app = Celery("lag", broker=REDIS, set_as_current=False)
    app.conf.update(
        task_default_queue=QUEUE,
        result_expires=None,
        beat_schedule={},
        durable_beat_sync_config=False,
    )
    return Scheduler(app, lazy=False)


def lags(sched: Any) -> list[int]:
    with sched.store._get_engine().connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT lag_ms FROM durable_beat_audit WHERE outcome = 'enqueued'"
        ).all()
    return sorted(int(row[0]) for row in rows)


def pct(values: list[int], p: float) -> int:
    return values[min(len(values) - 1, round(p * (len(values) - 1)))]


def idle_case(seconds: float) -> str:
    url = make_db(PG)
    try:
        sched = scheduler(url)
        store = sched.store
        start = (store.now_ms() // 1000 + 2) * 1000
        seed(store, 0, 100, start, 1000)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(max(0.0, min(float(sched.tick()), deadline - time.monotonic())))
        found = lags(sched)
        sched.close()
    finally:
        drop_db(PG, url)
    if not found:
        return f"idle, 100 schedules @every 1s for {seconds:g} s: no tick yet (run it longer)"
    return (
        f"idle, 100 schedules @every 1s for {seconds:g} s: {len(found)} ticks, lag p50 "
        f"{pct(found, 0.5)} ms, p99 {pct(found, 0.99)} ms, max {found[-1]} ms, "
        f"mean {statistics.fmean(found):.1f} ms"
    )


def burst_case(size: int, profile: bool = False) -> str:
    url = make_db(PG)
    try:
        sched = scheduler(url)
        store = sched.store
        due = store.now_ms() + 500
        seed(store, 0, size, due, 30 * 86_400_000)
        with store._get_engine().connect() as conn:
            conn.exec_driver_sql("ANALYZE")
        while store.now_ms() < due:
            time.sleep(0.01)
        profiler = cProfile.Profile() if profile else None
        if profiler is not None:
            profiler.enable()
        cpu = time.process_time()
        sched._wake_at = 0.0
        while sched.tick() <= 0:
            sched._wake_at = 0.0
        cpu = time.process_time() - cpu
        if profiler is not None:
            profiler.disable()
            report_profile(profiler)
        with store._get_engine().connect() as conn:
            last, count = conn.exec_driver_sql(
                "SELECT max(recorded_at_ms), count(*) FROM durable_beat_audit "
                "WHERE outcome = 'enqueued'"
            ).one()
        sched.close()
    finally:
        drop_db(PG, url)
        client = redis.Redis.from_url(REDIS)
        client.delete(QUEUE)
        client.close()
    return (
        f"burst of {size:,} due at once: {count:,} recorded; the last {last - due:,} ms late; "
        f"beat's own CPU {cpu / size * 1e6:.0f} us a tick"
    )


def report_profile(profiler: cProfile.Profile) -> None:
    """Where the burst's time went: the package's own calls by cumulative time, then the
    callees that cost the most in all (to stderr, so the figures on stdout stay clean)."""
    stats = pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative")
    stats.print_stats(r"celery_durable_beat", 30)
    stats.sort_stats("tottime").print_stats(25)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--burst", type=int, default=10_000)
    parser.add_argument(
        "--profile", action="store_true", help="cProfile the burst; the report goes to stderr"
    )
    options = parser.parse_args()
    print(idle_case(options.seconds))
    print(burst_case(options.burst, options.profile))
    return 0


if __name__ == "__main__":
    sys.exit(main())
