"""HTTP API and console benchmark (issue 12): 10,000 schedules on PostgreSQL, served for real.

Runs ``celery -A benchapp durable-beat serve`` as a process (uvicorn, one worker) and measures
from this process, one request at a time over keep-alive:

1. ``GET /api/v1/schedules`` (all 10,000, ~3.5 MB of JSON);
2. ``GET /api/v1/schedules/{name}/enqueue-events?limit=100`` for one schedule with 100 records;
3. ``GET /api/v1/schedules/{name}`` (one ``show``);
4. ``GET /`` (the console's first page: ``PAGE_SIZE`` rows, not 10,000);
5. ``GET /healthz``, the server's floor, as the reference measured in the same run;
6. ``DurableBeat.list()`` called in this process, the store's own cost of case 1 (reference).

Reports p50/p99 latency and requests/s per case (sequential: requests/s = 1 / mean latency).

    .venv/bin/python bench/bench_api.py [--pg URL] [--schedules 10000] [--requests 50]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from celery import Celery
from pgdb import drop_db, make_db

from celery_durable_beat import DurableBeat
from celery_durable_beat.celery_config import definitions_from_app
from celery_durable_beat.sync import sync_definitions

PG = os.environ.get("DURABLE_BEAT_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
TOKEN = "bench-viewer-token"
APP = """\
from celery import Celery

app = Celery("benchapp", broker="memory://", set_as_current=False)
app.conf.update(durable_beat_url={url!r}, durable_beat_api_tokens={{{token!r}: "operator"}})
"""


def seed(url: str, count: int) -> DurableBeat:
    entries = {
        f"tenant-{i:05d}": {
            "task": "proj.poll",
            "schedule": f"{i % 60} * * * *",
            "kwargs": {"n": i},
        }
        for i in range(count)
    }
    app = Celery("seed", broker="memory://", set_as_current=False)
    app.conf.update(
        durable_beat_url=url, beat_schedule=entries, durable_beat_api_tokens={TOKEN: "operator"}
    )
    beat = DurableBeat(app)
    sync_definitions(beat.store, definitions_from_app(app, beat.settings), beat.store.now_ms())
    for n in range(100):  # history for one schedule: 100 manual runs on the memory broker
        beat.trigger("tenant-00000", idempotency_key=f"bench-{n}")
    return beat


def measure(call: Callable[[], object], requests: int) -> list[float]:
    call()  # warm
    timings = []
    for _ in range(requests):
        started = time.perf_counter()
        call()
        timings.append(time.perf_counter() - started)
    return timings


def row(case: str, timings: list[float], floor: float) -> str:
    ordered = sorted(timings)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    rate = 1 / statistics.fmean(ordered)
    times = "\N{MULTIPLICATION SIGN}"
    return (
        f"| {case} | {p50 * 1000:.1f} | {p99 * 1000:.1f} | {rate:.1f} | {p50 / floor:.1f}{times} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pg", default=PG)
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=50)
    args = parser.parse_args()
    url = make_db(args.pg)
    folder = Path(tempfile.mkdtemp(prefix="bench_api_"))
    (folder / "benchapp.py").write_text(APP.format(url=url, token=TOKEN))
    beat = seed(url, args.schedules)
    port = 18_088
    env = {**os.environ, "PYTHONPATH": str(folder)}
    env.pop("DURABLE_BEAT_URL", None)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "benchapp",
            "durable-beat",
            "serve",
            "--port",
            str(port),
        ],
        cwd=folder,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(base + "/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("serve did not answer /healthz within 30 s")
            time.sleep(0.2)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
            http.cookies.set("durable_beat_session", TOKEN)

            def get(path: str) -> Callable[[], object]:
                def call() -> object:
                    answer = http.get(path)
                    assert answer.status_code == 200, (path, answer.status_code)
                    return answer

                return call

            size = len(http.get("/api/v1/schedules").content)
            floor = measure(get("/healthz"), args.requests)
            cases = [
                (
                    f"GET /api/v1/schedules ({args.schedules:,}, {size / 1e6:.1f} MB)",
                    get("/api/v1/schedules"),
                ),
                (
                    "GET …/tenant-00000/enqueue-events?limit=100",
                    get("/api/v1/schedules/tenant-00000/enqueue-events?limit=100"),
                ),
                ("GET /api/v1/schedules/tenant-00000", get("/api/v1/schedules/tenant-00000")),
                ("GET / (console, first page of 100 rows)", get("/")),
                ("GET /healthz (reference: the server's floor)", get("/healthz")),
                ("DurableBeat.list() in process (reference: the store's part)", beat.list),
            ]
            f50 = statistics.median(floor)
            print(
                f"{args.schedules:,} schedules on PostgreSQL, "
                f"{args.requests} sequential requests per case"
            )
            print("| case | p50 ms | p99 ms | requests/s | p50 ÷ /healthz p50 |")
            print("|---|---|---|---|---|")
            for case, call in cases:
                print(row(case, measure(call, args.requests), f50), flush=True)
    finally:
        server.terminate()
        server.wait(timeout=20)
        beat.close()
        drop_db(args.pg, url)


if __name__ == "__main__":
    main()
