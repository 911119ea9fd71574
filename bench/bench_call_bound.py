"""What the deadline on every PostgreSQL exchange costs the idle round (issue 41).

An idle round is one query (``SqlStore.clock_and_earliest_due``: the store's clock and the
earliest due instant; nine psycopg waits with the pool's ping). This runs it on two stores of one
database, in one process and one run, in blocks of a random order: one with the default bound
(every wait registered with the watchdog, ``store/sql/bounded.py``), one with
``durable_beat_call_timeout=0`` (plain psycopg connections, as in every release before). It
prints each one's median wall time and CPU time per round, in microseconds, and their ratios;
the machine is noisy, so the ratio of interleaved blocks is the figure that matters.

    .venv/bin/python bench/bench_call_bound.py [--pg URL] [--rounds 20000] [--blocks 50]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
import timeit
from collections.abc import Iterator
from typing import Any

import psycopg
from pgdb import drop_db, make_db

from celery_durable_beat.store.sql import SqlStore, bounded

PG = os.environ.get("DURABLE_BEAT_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def block(store: SqlStore, rounds: int) -> tuple[float, float]:
    """The median wall time of ``rounds`` idle rounds and their mean CPU time, in microseconds."""
    spent = []
    cpu = time.process_time()
    for _ in range(rounds):
        started = time.perf_counter()
        store.clock_and_earliest_due()
        spent.append(time.perf_counter() - started)
    return statistics.median(spent) * 1e6, (time.process_time() - cpu) / rounds * 1e6


def _done() -> Iterator[Any]:
    """A psycopg generator that needs no I/O: ``wait`` returns at once."""
    return
    yield


def per_wait_ns(bounded_conn: Any, plain_conn: Any) -> tuple[float, float]:
    """Nanoseconds of one ``wait`` with nothing to wait for, on each kind of connection."""
    times = []
    for conn in (bounded_conn, plain_conn):
        best = min(timeit.repeat(lambda c=conn: c.wait(_done()), number=200_000, repeat=5))
        times.append(best / 200_000 * 1e9)
    return times[0], times[1]


def waits_per_round(store: SqlStore) -> int:
    """How many psycopg waits one idle round makes (the pool's ping included)."""
    seen = [0]
    original = bounded.BoundedConnection.wait

    def counting(self: Any, gen: Any, *args: Any, **kwargs: Any) -> Any:
        seen[0] += 1
        return original(self, gen, *args, **kwargs)

    bounded.BoundedConnection.wait = counting  # type: ignore[method-assign]
    try:
        store.clock_and_earliest_due()
    finally:
        bounded.BoundedConnection.wait = original  # type: ignore[method-assign]
    return seen[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pg", default=PG)
    parser.add_argument("--rounds", type=int, default=20_000)
    parser.add_argument("--blocks", type=int, default=50)
    options = parser.parse_args()
    url = make_db(options.pg)
    stores = {
        "bounded (default 10 s)": SqlStore(url),
        "unbounded (=0)": SqlStore(f"{url}?durable_beat_call_timeout=0"),
    }
    try:
        for store in stores.values():
            store.ensure_schema()
            block(store, 500)  # warm: connections made, statements prepared
        wall: dict[str, list[float]] = {name: [] for name in stores}
        cpu: dict[str, list[float]] = {name: [] for name in stores}
        per_block = max(1, options.rounds // options.blocks)
        rng = random.Random(41)
        for _ in range(options.blocks):
            names = list(stores)
            rng.shuffle(names)  # no order bias between the two
            for name in names:
                w, c = block(stores[name], per_block)
                wall[name].append(w)
                cpu[name].append(c)
        for name in stores:
            print(
                f"{name:24} wall median {statistics.median(wall[name]):7.1f} us   "
                f"cpu {statistics.median(cpu[name]):7.1f} us   rounds {per_block * options.blocks}"
            )
        bounded_name, plain_name = stores
        for what, values in (("wall", wall), ("cpu", cpu)):
            ratio = statistics.median(values[bounded_name]) / statistics.median(values[plain_name])
            print(f"bounded / unbounded, {what}: {ratio:.3f}")
        dsn = options.pg.replace("+psycopg", "")
        with bounded.connect(10.0, dsn) as one, psycopg.connect(dsn) as other:
            with_bound, without = per_wait_ns(one, other)
        waits = waits_per_round(stores[bounded_name])
        added = (with_bound - without) * waits / 1000
        share = added / statistics.median(wall[plain_name]) * 100
        print(
            f"one wait: {with_bound:.0f} ns bounded, {without:.0f} ns plain; {waits} waits per "
            f"idle round: the deadline adds {added:.1f} us a round ({share:.1f} %)"
        )
    finally:
        for store in stores.values():
            store.close()
        drop_db(options.pg, url)


if __name__ == "__main__":
    main()
