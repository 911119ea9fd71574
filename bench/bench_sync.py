"""Config sync benchmark (issue 10, item 5): 20,000 ``beat_schedule`` entries on PostgreSQL.

Measures, each on a fresh database, in one run:

Each case runs twice: on a generated config whose entries share schedules (the usual shape of a
config this large) and on one where every entry has a schedule of its own (sync's worst case:
one first-tick plan per entry).

1. the first start: every entry created (target ≤ 3 s);
2. an unchanged restart: nothing to write (target ≤ 1 s);
3. a restart where 1 % of the entries changed;
4. the same three through the per-entry path this replaced (``get`` + ``upsert`` per entry, then
   one ``set_state`` per config schedule left out) on ``--reference-entries`` (default 2,000:
   it is ~25x slower), for the ratio per entry, measured in the same run: the machine is noisy.

Config validation is not timed (beat does it once, before any store call).

    .venv/bin/python bench/bench_sync.py [--pg URL] [--entries 20000] [--reference-entries 2000]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Sequence

from pgdb import drop_db, make_db

from celery_durable_beat.model import Definition, ScheduleState, Source
from celery_durable_beat.policy import first_tick_ms
from celery_durable_beat.schedules.validate import validate_entries
from celery_durable_beat.store.sql import SqlStore
from celery_durable_beat.sync import sync_definitions

PG = os.environ.get("DURABLE_BEAT_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def entries(count: int, salt: int = 0, distinct: bool = False) -> list[Definition]:
    """A realistic mix: intervals, cron strings in zones, args and options.

    Generated configs share schedules (here 60 cron and 300 interval schedules among 20,000
    entries); ``distinct`` gives every entry a schedule of its own, sync's worst case.
    """
    raw = {}
    for i in range(count):
        if i % 2 and distinct:
            day = 1 + (i // 1440) % 28
            cron = f"{(i // 2) % 60} {(i // 120) % 24} {day},{day + 1} * *"
            entry = {"task": "proj.report", "schedule": cron, "tz": "Europe/Berlin"}
        elif i % 2:
            entry = {
                "task": "proj.report",
                "schedule": f"{i % 60} {i % 24} * * *",
                "tz": "Europe/Berlin",
            }
        elif distinct:
            entry = {"task": "proj.poll", "schedule": f"@every {30 + i}s"}
        else:
            entry = {"task": "proj.poll", "schedule": f"@every {30 + i % 300}s"}
        raw[f"entry-{i:06d}"] = {
            **entry,
            "args": [i, salt if i % 100 == 0 else 0],
            "options": {"queue": "q"},
        }
    return validate_entries(raw)


def old_sync(store: SqlStore, definitions: Sequence[Definition], now_ms: int) -> None:
    """The per-entry path this item replaced, for the same-run reference."""
    for definition in definitions:
        existing = store.get(definition.name)
        if existing is not None and existing.source is Source.API:
            continue
        store.upsert(definition, Source.CONFIG, first_tick_ms(definition, now_ms), now_ms)
    wanted = {d.name.lower() for d in definitions}
    for record in store.list_schedules():
        if (
            record.source is Source.CONFIG
            and record.state is not ScheduleState.ARCHIVED
            and record.name.lower() not in wanted
        ):
            store.set_state(record.name, ScheduleState.ARCHIVED, now_ms)


def timed(step: Callable[[], object]) -> float:
    started = time.perf_counter()
    step()
    return time.perf_counter() - started


def run(admin: str, count: int, path: str, distinct: bool = False) -> dict[str, float]:
    url = make_db(admin)
    store = SqlStore(url)
    try:
        store.ensure_schema()
        first = entries(count, distinct=distinct)
        changed = entries(count, salt=1, distinct=distinct)
        if path == "bulk":
            sync = lambda defs: sync_definitions(store, defs, store.now_ms(), epoch=0)  # noqa: E731
        else:
            sync = lambda defs: old_sync(store, defs, store.now_ms())  # noqa: E731
        figures = {}
        for case, defs in (
            ("first start", first),
            ("unchanged restart", first),
            ("1 % changed", changed),
        ):
            figures[case] = timed(lambda: sync(defs))  # noqa: B023 (called at once)
            label = f"{path}{' distinct' if distinct else ''}"
            print(
                f"  {label:<14} {count:>6,} entries  {case:<18} {figures[case]:7.2f} s", flush=True
            )
        return figures
    finally:
        store.close()
        drop_db(admin, url)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pg", default=PG)
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--reference-entries", type=int, default=2_000)
    args = parser.parse_args()
    shared = run(args.pg, args.entries, "bulk")
    distinct = run(args.pg, args.entries, "bulk", distinct=True)
    old = run(args.pg, args.reference_entries, "per-entry")
    print(f"config sync on PostgreSQL: bulk {args.entries:,}, per-entry {args.reference_entries:,}")
    print(
        f"{'schedules':<10}{'case':<20}{'bulk (s)':>10}{'ms/entry':>10}{'old ms/entry':>14}"
        f"{'speed-up':>10}"
    )
    for kind, bulk in (("shared", shared), ("distinct", distinct)):
        for case, seconds in bulk.items():
            per = seconds * 1000 / args.entries
            old_per = old[case] * 1000 / args.reference_entries
            print(
                f"{kind:<10}{case:<20}{seconds:>10.2f}{per:>10.3f}{old_per:>14.3f}"
                f"{old_per / per:>9.1f}x"
            )


if __name__ == "__main__":
    main()
