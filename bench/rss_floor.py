"""Where a beat process's RSS comes from (issue 16, goal 3): each line is a fresh interpreter
that imports one more layer than the line before, and prints its RSS.

The steps are cumulative: the difference between two lines is what that layer adds (pydantic is
not a step: since issue 29 a beat whose settings are plain never imports it). The last
lines are this package's beat: the scheduler module, then a ``Scheduler`` built on a throwaway
PostgreSQL database (``pgdb.make_db``) with a Redis broker (db 15) that has run 20 idle rounds.

    .venv/bin/python bench/rss_floor.py
"""

from __future__ import annotations

import os
import subprocess
import sys

PG = os.environ.get("DURABLE_BEAT_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("DURABLE_BEAT_BENCH_REDIS", "redis://127.0.0.1:6379/15")

RSS = """
def _rss():
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * __import__('os').sysconf('SC_PAGE_SIZE') / 1e6
"""

STEPS: list[tuple[str, str]] = [
    ("the interpreter", "pass"),
    ("+ celery, an app", "import celery; app = celery.Celery('b', broker=%(redis)r)"),
    ("+ kombu's Redis transport", "import kombu.transport.redis"),
    ("+ redis-py", "import redis"),
    ("+ SQLAlchemy core", "import sqlalchemy"),
    ("+ psycopg 3", "import psycopg"),
    ("+ croniter", "import croniter"),
    ("+ celery_durable_beat.scheduler", "import celery_durable_beat.scheduler"),
    (
        "+ a Scheduler on PostgreSQL, 20 idle rounds",
        "import os; os.environ['DURABLE_BEAT_URL'] = %(db)r\n"
        "app.conf.update(beat_schedule={}, durable_beat_sync_config=False)\n"
        "from celery_durable_beat.scheduler import Scheduler\n"
        "s = Scheduler(app, lazy=False)\n"
        "for _ in range(20):\n    s._wake_at = 0.0; s.tick()\n"
        "s.close()",
    ),
]


def measure(upto: int, db: str) -> float:
    code = RSS + "\n".join(body % {"redis": REDIS, "db": db} for _, body in STEPS[: upto + 1])
    code += "\nprint(_rss())"
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    return float(out.strip().splitlines()[-1])


def main() -> int:
    from pgdb import drop_db, make_db

    db = make_db(PG)
    try:
        previous = 0.0
        print("| step | RSS (MB) | added (MB) |\n|---|---|---|")
        for i, (label, _) in enumerate(STEPS):
            rss = min(measure(i, db) for _ in range(3))  # the least of three fresh processes
            print(f"| {label} | {rss:.1f} | {rss - previous:+.1f} |")
            previous = rss
    finally:
        drop_db(PG, db)
    return 0


if __name__ == "__main__":
    sys.exit(main())
