"""Scale benchmark of the durable beat (issue 3), in one process and one run.

Measures, against the machine's PostgreSQL and Redis:

1. the idle round (nothing due) at 1k, 10k and 100k schedules: median ms of one round as beat's
   ``Scheduler`` runs it (lease, store clock, due query, next-wake query), and beat's RSS;
2. a burst of 10k due ticks published to a Redis broker end to end (published + audited +
   advanced, per second), next to a raw kombu publish of the same messages with one reused
   producer, measured in the same run. The ratio is the figure that matters: the machine is noisy.

    .venv/bin/python bench/bench_scale.py [--pg URL] [--redis URL] [--sizes 1000,10000,100000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

import redis
from celery import Celery
from pgdb import drop_db, make_db
from sqlalchemy import text

from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.model import Definition
from celery_durable_beat.scheduler import Scheduler
from celery_durable_beat.schedules.spec import IntervalSpec
from celery_durable_beat.store.sql import SqlStore

PG = os.environ.get("DURABLE_BEAT_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("DURABLE_BEAT_BENCH_REDIS", "redis://127.0.0.1:6379/15")


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


SEED_SQL = text("""
    INSERT INTO durable_beat_schedules
        (name, name_key, definition, definition_hash, version, source, state, next_tick_ms,
         next_due_ms, last_tick_ms, last_outcome, failures, epoch, created_at_ms, updated_at_ms)
    SELECT 'sched-' || lpad(g::text, 8, '0'), 'sched-' || lpad(g::text, 8, '0'),
           CAST(:definition AS json), :hash, 1, 'api', 'active', :due, :due,
           NULL, NULL, 0, 1, :now, :now
    FROM generate_series(CAST(:first AS bigint), CAST(:last AS bigint)) AS g
""")


def seed(store: SqlStore, start: int, count: int, due_at: int, every_ms: int) -> None:
    """Insert schedules server-side (generate_series), so no seeding object lives in beat."""
    d = Definition(
        name="x", task="bench.noop", spec=IntervalSpec(every_ms), kwargs={"pad": "x" * 64}
    )
    params = {
        "definition": json.dumps(d.to_json()),
        "hash": d.definition_hash(),
        "due": due_at,
        "now": store.now_ms(),
        "first": start,
        "last": start + count - 1,
    }
    with store._get_engine().begin() as conn:
        conn.execute(SEED_SQL, params)


def idle_rounds(app: Celery, url: str, sizes: list[int]) -> list[dict[str, float]]:
    os.environ["DURABLE_BEAT_URL"] = url
    app.conf.beat_schedule = {}
    scheduler = Scheduler(app, lazy=False)
    store = scheduler.store
    assert isinstance(store, SqlStore)
    far = store.now_ms() + 10 * 86_400_000
    results, have = [], 0
    for size in sizes:
        seed(store, have, size - have, far, 86_400_000 * 30)
        have = size
        with store._get_engine().connect() as conn:  # fresh statistics, as autovacuum would give
            conn.exec_driver_sql("ANALYZE")
        for _ in range(20):
            scheduler._round()
        samples = []
        for _ in range(200):
            t = time.perf_counter_ns()
            scheduler._round()
            samples.append((time.perf_counter_ns() - t) / 1e6)
        results.append(
            {
                "schedules": size,
                "idle_round_ms_median": statistics.median(samples),
                "idle_round_ms_p90": sorted(samples)[int(len(samples) * 0.9)],
                "rss_mb": rss_mb(),
            }
        )
        print(
            f"  {size:>7} schedules: idle round median "
            f"{results[-1]['idle_round_ms_median']:.3f} ms,"
            f" RSS {results[-1]['rss_mb']:.1f} MB",
            flush=True,
        )
    scheduler.close()
    return results


def burst(app: Celery, url: str, redis_url: str, count: int) -> dict[str, float]:
    client = redis.Redis.from_url(redis_url)
    client.delete("celery")
    os.environ["DURABLE_BEAT_URL"] = url
    scheduler = Scheduler(app, lazy=False)
    store = scheduler.store
    assert isinstance(store, SqlStore)
    scheduler._round()  # lead, sync, warm the connection
    due = store.now_ms() - 1000
    seed(store, 10_000_000, count, due, 86_400_000 * 30)
    with store._get_engine().connect() as conn:
        conn.exec_driver_sql("ANALYZE")
    t = time.perf_counter()
    rounds = 0
    while True:
        rounds += 1
        assert scheduler.dispatcher is not None and scheduler.loop is not None
        stats = scheduler.dispatcher.run_round(store.now_ms(), scheduler.loop.leadership.epoch)
        if stats.claimed == 0:
            break
    elapsed = time.perf_counter() - t
    queued = client.llen("celery")
    with store._get_engine().connect() as conn:
        audited = conn.exec_driver_sql(
            "SELECT count(*) FROM durable_beat_audit WHERE outcome = 'enqueued'"
        ).scalar_one()
        advanced = conn.exec_driver_sql(
            "SELECT count(*) FROM durable_beat_schedules WHERE next_tick_ms > %(due)s", {"due": due}
        ).scalar_one()
    scheduler.close()
    client.delete("celery")
    # The reference: the very same Celery messages (built beforehand with Celery's own
    # protocol code), published one by one through one reused kombu producer, no beat at all.
    names = [f"sched-{i:08d}" for i in range(10_000_000, 10_000_000 + count)]
    built = [
        app.amqp.as_task_v2(tick_task_id(n, due), "bench.noop", kwargs={"pad": "x" * 64})
        for n in names
    ]

    def publish_all(producer: Any) -> None:
        for message in built:
            producer.publish(
                message.body,
                exchange="",
                routing_key="celery",
                serializer="json",
                headers=message.headers,
                delivery_mode=2,
                **message.properties,
            )

    with app.producer_or_acquire() as producer:
        t = time.perf_counter()
        publish_all(producer)
        raw_elapsed = time.perf_counter() - t
        client.delete("celery")
        t = time.perf_counter()
        with producer.batch(max_size=200):
            publish_all(producer)
        raw_batch_elapsed = time.perf_counter() - t
    client.delete("celery")
    client.close()
    return {
        "ticks": count,
        "rounds": rounds,
        "published": queued,
        "audited": audited,
        "advanced": advanced,
        "beat_per_s": count / elapsed,
        "raw_kombu_per_s": count / raw_elapsed,
        "raw_kombu_batched_per_s": count / raw_batch_elapsed,
        "ratio_to_raw_kombu": (count / elapsed) / (count / raw_elapsed),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pg", default=PG)
    parser.add_argument("--redis", default=REDIS)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--burst", type=int, default=10_000)
    options = parser.parse_args()
    app = Celery("bench", broker=options.redis, set_as_current=False)
    app.conf.durable_beat_batch_size = 2000
    sizes = [int(s) for s in options.sizes.split(",")]
    report: dict[str, Any] = {}
    for phase in ("idle", "burst"):
        url = make_db(options.pg)
        try:
            if phase == "idle":
                print("idle round (nothing due):", flush=True)
                report["idle"] = idle_rounds(app, url, sizes)
            else:
                print(f"burst of {options.burst} due ticks to Redis:", flush=True)
                report["burst"] = burst(app, url, options.redis, options.burst)
                b = report["burst"]
                print(
                    f"  beat end to end {b['beat_per_s']:.0f}/s ({b['rounds']} rounds); raw kombu, "
                    f"same messages, one producer {b['raw_kombu_per_s']:.0f}/s (pipelined: "
                    f"{b['raw_kombu_batched_per_s']:.0f}/s); ratio beat/raw = "
                    f"{b['ratio_to_raw_kombu']:.2f}",
                    flush=True,
                )
                assert b["published"] == b["audited"] == b["advanced"] == options.burst, b
        finally:
            drop_db(options.pg, url)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
