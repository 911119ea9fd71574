"""What monitoring integrations cost a burst (SPEC §17), beside the fast path they leave alone.

A burst of due ticks (default 10k) published to a Redis broker end to end (published, audited,
advanced) by beat's own ``Scheduler`` and dispatcher, as ``bench_scale.py``'s burst, in one
fresh process per mode, the modes interleaved ``--repeat`` times (the machine is noisy; compare
medians of the same run):

- ``plain``: nothing installed: the templated Redis path;
- ``signal``: a ``before_task_publish`` receiver that changes nothing: what any receiver costs
  (templating steps aside, every tick goes through ``send_task`` and sends the signals);
- ``otel``: ``CeleryInstrumentor().instrument()`` on OpenTelemetry's SDK with an exporter that
  drops spans: a publish span per tick and its context injected into the headers;
- ``wrapped``: a wrapper of ``celery.beat.Scheduler.apply_entry`` that only calls Celery's:
  every tick through ``apply_entry`` (``publish/through_beat.py``);
- ``sentry``: ``sentry_sdk.init`` with ``CeleryIntegration(monitor_beat_tasks=True)`` and a
  transport that drops envelopes: a check-in per tick, Sentry's headers.

    .venv/bin/python bench/bench_observed.py [--burst 10000] [--repeat 3] [--modes plain,otel]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from bench_scale import seed
from celery import Celery
from pgdb import drop_db, make_db

PG = os.environ.get("DURABLE_BEAT_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("DURABLE_BEAT_BENCH_REDIS", "redis://127.0.0.1:6379/15")
MODES = ("plain", "signal", "otel", "wrapped", "sentry")


def install(mode: str) -> None:
    """Put the mode's integration in place, before beat is built (as an app module would)."""
    if mode == "signal":
        from celery import signals

        signals.before_task_publish.connect(lambda **_: None, weak=False)
    elif mode == "otel":
        from opentelemetry import trace
        from opentelemetry.instrumentation.celery import CeleryInstrumentor
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            SimpleSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )

        class Drop(SpanExporter):
            def export(self, spans: Any) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(Drop()))
        trace.set_tracer_provider(provider)
        CeleryInstrumentor().instrument()
    elif mode == "wrapped":
        from celery import beat

        stock = beat.Scheduler.apply_entry

        def passes_through(self: Any, entry: Any, producer: Any = None) -> None:
            return stock(self, entry, producer=producer)

        beat.Scheduler.apply_entry = passes_through
    elif mode == "sentry":
        import sentry_sdk
        from sentry_sdk.integrations.celery import CeleryIntegration
        from sentry_sdk.transport import Transport

        class Drop(Transport):  # type: ignore[no-redef]
            def capture_envelope(self, envelope: Any) -> None:
                pass

        sentry_sdk.init(
            dsn="http://key@127.0.0.1:9/1",
            transport=Drop,
            integrations=[CeleryIntegration(monitor_beat_tasks=True)],
        )


def one(mode: str, pg: str, redis_url: str, count: int) -> dict[str, Any]:
    """One burst in this process, after ``install(mode)``."""
    install(mode)
    from celery_durable_beat.scheduler import Scheduler
    from celery_durable_beat.store.sql import SqlStore

    app = Celery("bench", broker=redis_url, set_as_current=False)
    app.conf.durable_beat_batch_size = 2000
    app.conf.beat_schedule = {}
    client = redis.Redis.from_url(redis_url)
    client.delete("celery")
    url = make_db(pg)
    try:
        os.environ["DURABLE_BEAT_URL"] = url
        scheduler = Scheduler(app, lazy=False)
        store = scheduler.store
        assert isinstance(store, SqlStore) and scheduler.dispatcher and scheduler.loop
        scheduler._round()  # lead, sync, warm the connection
        due = store.now_ms() - 1000
        seed(store, 10_000_000, count, due, 86_400_000 * 30)
        with store._get_engine().connect() as conn:
            conn.exec_driver_sql("ANALYZE")
        sessions: list[str] = []
        publisher: Any = scheduler.dispatcher.publisher
        opened = publisher.session

        @contextmanager
        def spied() -> Iterator[Any]:
            with opened() as session:
                sessions.append(type(session).__name__)
                yield session

        publisher.session = spied
        t = time.perf_counter()
        while scheduler.dispatcher.run_round(
            store.now_ms(), scheduler.loop.leadership.epoch
        ).claimed:
            pass
        elapsed = time.perf_counter() - t
        published = client.llen("celery")
        with store._get_engine().connect() as conn:
            audited = conn.exec_driver_sql(
                "SELECT count(*) FROM durable_beat_audit WHERE outcome = 'enqueued'"
            ).scalar_one()
        scheduler.close()
    finally:
        drop_db(pg, url)
        client.delete("celery")
        client.close()
    assert published == audited == count, (published, audited, count)
    return {"mode": mode, "per_s": count / elapsed, "session": sorted(set(sessions))}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pg", default=PG)
    parser.add_argument("--redis", default=REDIS)
    parser.add_argument("--burst", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--mode", help=argparse.SUPPRESS)  # one burst in this process
    options = parser.parse_args()
    if options.mode:
        print(json.dumps(one(options.mode, options.pg, options.redis, options.burst)))
        return 0
    runs: dict[str, list[float]] = {}
    sessions: dict[str, list[str]] = {}
    for _ in range(options.repeat):
        for mode in options.modes.split(","):
            out = (
                subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--mode",
                        mode,
                        "--pg",
                        options.pg,
                        "--redis",
                        options.redis,
                        "--burst",
                        str(options.burst),
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                )
                .stdout.strip()
                .splitlines()[-1]
            )
            result = json.loads(out)
            runs.setdefault(mode, []).append(result["per_s"])
            sessions[mode] = result["session"]
    base = statistics.median(runs[next(iter(runs))])
    for mode, rates in runs.items():
        median = statistics.median(rates)
        print(
            f"{mode:8s} median {median:7.0f} ticks/s ({median / base:.2f} of the first mode; "
            f"runs {', '.join(f'{r:.0f}' for r in rates)}; session {', '.join(sessions[mode])})",
            flush=True,
        )
    print(json.dumps({"runs": runs, "sessions": sessions}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
