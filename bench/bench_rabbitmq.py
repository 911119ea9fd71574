"""Publishing a burst to RabbitMQ with publisher confirms, next to raw kombu (issue 10, item 3).

One run, one machine, the same messages: beat end to end (published + confirmed + audited +
advanced) against the machine's PostgreSQL and RabbitMQ, then raw kombu through one producer
without confirms, and raw kombu with kombu's own ``confirm_publish`` (a round trip per
message). The ratios are the figures that matter: the machine is noisy.

    .venv/bin/python bench/bench_rabbitmq.py [--pg URL] [--amqp URL] [--burst 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from typing import Any

from bench_scale import PG, drop_db, make_db, seed
from celery import Celery
from kombu import Connection, Queue

from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.scheduler import Scheduler
from celery_durable_beat.store.sql import SqlStore

AMQP = os.environ.get("DURABLE_BEAT_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672//")


def purge(amqp: str, queue: str) -> int:
    with Connection(amqp) as conn:
        return int(Queue(queue)(conn.default_channel).purge() or 0)


def beat_burst(app: Celery, url: str, amqp: str, queue: str, count: int) -> dict[str, float]:
    os.environ["DURABLE_BEAT_URL"] = url
    scheduler = Scheduler(app, lazy=False)
    store = scheduler.store
    assert isinstance(store, SqlStore)
    scheduler._round()  # lead, sync, warm the connection
    due = store.now_ms() - 1000
    seed(store, 10_000_000, count, due, 86_400_000 * 30)
    t, rounds = time.perf_counter(), 0
    while True:
        rounds += 1
        assert scheduler.dispatcher is not None and scheduler.loop is not None
        epoch = scheduler.loop.leadership.epoch
        if scheduler.dispatcher.run_round(store.now_ms(), epoch).claimed == 0:
            break
    elapsed = time.perf_counter() - t
    with store._get_engine().connect() as conn:
        audited = conn.exec_driver_sql(
            "SELECT count(*) FROM durable_beat_audit WHERE outcome = 'enqueued'"
        ).scalar_one()
    scheduler.close()
    return {
        "rounds": rounds,
        "published": purge(amqp, queue),
        "audited": audited,
        "beat_per_s": count / elapsed,
        "due": due,
    }


def raw(app: Celery, amqp: str, queue: str, count: int, due: int, confirm: bool) -> float:
    """Messages per second through one kombu producer (kombu's confirm_publish if asked)."""
    built = [
        app.amqp.as_task_v2(
            tick_task_id(f"sched-{i:08d}", due), "bench.noop", kwargs={"pad": "x" * 64}
        )
        for i in range(10_000_000, 10_000_000 + count)
    ]
    options = {"confirm_publish": True} if confirm else {}
    with Connection(amqp, transport_options=options) as conn:
        producer = conn.Producer()
        t = time.perf_counter()
        for message in built:
            producer.publish(
                message.body,
                exchange="",
                routing_key=queue,
                serializer="json",
                headers=message.headers,
                delivery_mode=2,
                **message.properties,
            )
        elapsed = time.perf_counter() - t
    assert purge(amqp, queue) == count
    return count / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pg", default=PG)
    parser.add_argument("--amqp", default=AMQP)
    parser.add_argument("--burst", type=int, default=10_000)
    options = parser.parse_args()
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    app = Celery("bench", broker=options.amqp, set_as_current=False)
    app.conf.task_default_queue = queue
    app.conf.durable_beat_batch_size = 2000
    url = make_db(options.pg)
    report: dict[str, Any] = {"ticks": options.burst}
    try:
        report.update(beat_burst(app, url, options.amqp, queue, options.burst))
        report["raw_kombu_per_s"] = raw(
            app, options.amqp, queue, options.burst, report["due"], confirm=False
        )
        report["raw_kombu_confirm_each_per_s"] = raw(
            app, options.amqp, queue, options.burst, report["due"], confirm=True
        )
    finally:
        drop_db(options.pg, url)
        with Connection(options.amqp) as conn:
            Queue(queue)(conn.default_channel).delete()
    report["ratio_to_raw_kombu"] = report["beat_per_s"] / report["raw_kombu_per_s"]
    print(
        f"burst of {options.burst} ticks to RabbitMQ, with publisher confirms: beat end to end "
        f"{report['beat_per_s']:.0f}/s ({report['rounds']} rounds); raw kombu, same messages, "
        f"no confirms {report['raw_kombu_per_s']:.0f}/s, confirm each "
        f"{report['raw_kombu_confirm_each_per_s']:.0f}/s; ratio beat/raw = "
        f"{report['ratio_to_raw_kombu']:.2f}"
    )
    assert report["published"] == report["audited"] == options.burst, report
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
