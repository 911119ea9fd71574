"""What one claim costs with the claims in the store, and what batching would save (SPEC §6:
the guard's cost per tick is small; issue 24).

A claim is the tick's run row, taken with one ``INSERT … ON CONFLICT … DO UPDATE … WHERE``
(``runs/pg_direct.py``'s ``CLAIM``, as a guarded worker's pool process runs it). This times, in
one process on a fresh database, per tick: the wall time, this process's CPU and the CPU of the
PostgreSQL backend serving its connection (read from ``/proc``, so the server must run on this
machine), for

- the product's claim, one statement a tick (``DirectPg.claim``);
- the same rule for N ticks in one statement (rows from ``unnest`` of one array per column, one
  commit for all), N = 1, 4, 16, with the server's ``synchronous_commit`` and with it ``off``;
- run-state writes (runs' ends, ``OWNER``, each updating its tick's claimed row), N in one call:
  ``DirectPg.write`` as it is (one statement of N rows) against one pipelined ``executemany`` of
  N rows in a transaction (how ``DirectPg.write`` wrote a batch before), N = 4, 16, 32.

    .venv/bin/python bench/claim_cost.py            # 3,000 ticks per line
    .venv/bin/python bench/claim_cost.py --ticks 600

PostgreSQL comes from ``DURABLE_BEAT_TEST_PG``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import procstat
from pgdb import drop_db, make_db
from sqlalchemy import BigInteger, String, and_, func, literal, or_, select
from sqlalchemy.dialects.postgresql import ARRAY, insert
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from celery_durable_beat.runs import pg_direct  # noqa: E402
from celery_durable_beat.runs.base import RunState, WriteIf  # noqa: E402
from celery_durable_beat.runs.sql import replace_run  # noqa: E402
from celery_durable_beat.store.sql.engine import PG_NOW  # noqa: E402
from celery_durable_beat.store.tables import runs  # noqa: E402
from tests.support.rig import ensure_schema  # noqa: E402

PG = os.environ.get("DURABLE_BEAT_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
TTL_MS = 60_000


def claim_many_statement() -> pg_direct.Compiled:
    """Rule 1 of ``runs/base.py`` for first deliveries, many ticks in one statement."""
    p = pg_direct._param  # the product's own parameter helper
    wanted = (
        func.unnest(
            p("task_ids", ARRAY(String)),
            p("schedule_keys", ARRAY(String)),
            p("tick_mss", ARRAY(BigInteger)),
            p("owners", ARRAY(String)),
        )
        .table_valued("task_id", "schedule_key", "tick_ms", "owner")
        .render_derived(name="wanted")
    )
    rows = select(
        wanted.c.task_id,
        wanted.c.schedule_key,
        wanted.c.tick_ms,
        literal("auto"),
        literal(RunState.STARTED.value),
        wanted.c.owner,
        PG_NOW,
        PG_NOW + p("keep_ms", BigInteger),
    ).order_by(wanted.c.task_id)
    columns = ["task_id", "schedule_key", "tick_ms", "trigger", "state", "hostname"]
    stmt = insert(runs).from_select([*columns, "updated_at_ms", "expires_at_ms"], rows)
    takeover = or_(
        runs.c.expires_at_ms < stmt.excluded.updated_at_ms,
        and_(runs.c.hostname == stmt.excluded.hostname, runs.c.state == RunState.STARTED.value),
    )
    return pg_direct._compile(replace_run(stmt, takeover).returning(runs.c.task_id))


def one(i: int) -> dict[str, Any]:
    return {
        "task_id": f"tick-{i}-{uuid.uuid4().hex}",
        "schedule_key": "bench",
        "tick_ms": i,
        "trigger": "auto",
        "state": RunState.STARTED.value,
        "owner": f"bench@host:{os.getpid()}:{uuid.uuid4().hex[:12]}",
        "keep_ms": TTL_MS,
    }


class Meter:
    """Wall, this process's CPU and one backend's CPU over a block, per tick."""

    def __init__(self, backend_pid: int) -> None:
        self.backend_pid = backend_pid

    def backend_cpu(self) -> float:
        return procstat.cpu_of(self.backend_pid)

    def run(self, label: str, ticks: int, block: Callable[[], None]) -> None:
        w0, c0, b0 = time.perf_counter(), time.process_time(), self.backend_cpu()
        block()
        wall = (time.perf_counter() - w0) / ticks * 1e6
        cpu = (time.process_time() - c0) / ticks * 1e6
        backend = (self.backend_cpu() - b0) / ticks * 1e6
        print(f"| {label} | {wall:.0f} | {cpu:.0f} | {backend:.0f} |", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ticks", type=int, default=3000)
    args = parser.parse_args()
    ticks: int = args.ticks
    store = make_db(PG)
    try:
        ensure_schema(store)
        direct = pg_direct.DirectPg(make_url(store), "bench")
        for i in range(200):  # warm: connection made, statement prepared on the server
            direct.claim(one(i), 0)
        conn = direct._idle[0]  # the one connection the claims used
        meter = Meter(conn.info.backend_pid)
        many = claim_many_statement()
        print(f"uptime: {os.getloadavg()}; {ticks} ticks a line; µs per tick")
        print("| claim | wall | this process's CPU | PostgreSQL backend's CPU |")
        print("|---|---|---|---|")
        meter.run("one statement a tick (DirectPg.claim)", ticks, lambda: _singles(direct, ticks))
        for commit in ("on", "off"):
            conn.execute("SELECT set_config('synchronous_commit', %s, false)", (commit,))
            for batch in (1, 4, 16):
                label = f"{batch} a statement, synchronous_commit {commit}"
                meter.run(label, ticks, lambda b=batch: _batches(conn, many, ticks, b))
        conn.execute("SELECT set_config('synchronous_commit', 'on', false)")
        print(
            "\n| run-state writes (ends) | wall | this process's CPU | PostgreSQL backend's CPU |"
        )
        print("|---|---|---|---|")
        for batch in (4, 16, 32):
            started = _started(direct, ticks)
            label = f"{batch} a call, DirectPg.write"
            meter.run(label, ticks, lambda b=batch, r=started: _writes(direct, r, b))
            started = _started(direct, ticks)
            label = f"{batch} a call, one executemany"
            meter.run(label, ticks, lambda b=batch, r=started: _executemany(conn, r, b))
        direct.close()
    finally:
        drop_db(PG, store)
    return 0


def _singles(direct: pg_direct.DirectPg, ticks: int) -> None:
    for i in range(ticks):
        if direct.claim(one(i), 0) is not None:
            raise SystemExit("a fresh tick was refused")


def _batches(conn: Any, many: pg_direct.Compiled, ticks: int, batch: int) -> None:
    for start in range(0, ticks, batch):
        rows = [one(i) for i in range(start, start + batch)]
        params = many.params(
            {
                "task_ids": [r["task_id"] for r in rows],
                "schedule_keys": [r["schedule_key"] for r in rows],
                "tick_mss": [r["tick_ms"] for r in rows],
                "owners": [r["owner"] for r in rows],
                "keep_ms": TTL_MS,
            }
        )
        if len(conn.execute(many.sql, params).fetchall()) != batch:
            raise SystemExit("a fresh tick was refused")


def _started(direct: pg_direct.DirectPg, ticks: int) -> list[dict[str, Any]]:
    """``ticks`` claimed rows (not timed): the ends below update them, as a run's end does."""
    rows = [one(i) for i in range(ticks)]
    for start in range(0, ticks, 100):
        direct.write([(WriteIf.ALWAYS, r) for r in rows[start : start + 100]])
    return [{**r, "state": RunState.SUCCEEDED.value, "keep_ms": 10 * TTL_MS} for r in rows]


def _writes(direct: pg_direct.DirectPg, ends: list[dict[str, Any]], batch: int) -> None:
    for start in range(0, len(ends), batch):
        direct.write([(WriteIf.OWNER, e) for e in ends[start : start + batch]])


def _executemany(conn: Any, ends: list[dict[str, Any]], batch: int) -> None:
    statement = pg_direct.OWNER
    for start in range(0, len(ends), batch):
        rows = [statement.params(e) for e in ends[start : start + batch]]
        with conn.transaction(), conn.cursor() as cur:
            cur.executemany(statement.sql, rows)


if __name__ == "__main__":
    sys.exit(main())
