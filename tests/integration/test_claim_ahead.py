"""Where a real worker claims its ticks: ahead, in the main process (``worker/ahead.py``), for a
prefork worker whose claims are the store's rows (a RabbitMQ broker here); in the pool process
that runs the tick otherwise (claims in Redis, or the threads and solo pools). Every pool with an
event loop, both brokers, ``acks_late`` on and off; each tick once, duplicates refused.

Each tick's run row names its owner, ``<node>:<pid>:<token>``: with the claim taken ahead the
pid is the worker's main process, not the pool process that ran the task (which the task
writes in its own row); an ``acks_late`` tick's end is then written by the main process before
its message is acknowledged.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.runs.base import RunRecord, RunState
from celery_durable_beat.runs.sql import SqlRunStore
from tests.support.procs import wait_until
from tests.support.rig import ProcessRig, rig_factory, tick_headers

pytestmark = pytest.mark.integration

T0 = 1_780_000_000_000
MINUTE = 60_000


@pytest.fixture(params=["redis", "rabbitmq"])
def broker(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_rig(
    broker: str, tmp_path: Path, pg_url: str, redis_url: str, amqp_url: str
) -> Iterator[Any]:
    if broker == "redis":
        rig = partial(ProcessRig, store_url=pg_url, broker_url=redis_url)
    else:  # a queue of its own: a RabbitMQ queue outlives the test
        queue = f"ahead-{tmp_path.name[-12:]}"
        rig = partial(ProcessRig, store_url=pg_url, broker_url=amqp_url, queue=queue)
    with rig_factory(tmp_path, rig) as make:
        yield make


@pytest.mark.parametrize("pool", ["prefork", "threads", "solo"])
@pytest.mark.parametrize("task", ["procapp.record", "procapp.late_record"])
def test_ticks_are_claimed_where_it_pays_and_run_once(
    make_rig: Any, broker: str, pool: str, task: str
) -> None:
    rig = make_rig()
    worker = rig.worker(pool, 2)
    ids = [tick_task_id("Ahead", T0 + i * MINUTE) for i in range(20)]
    for i, task_id in enumerate(ids):
        rig.send(task, task_id, tick_headers("Ahead", T0 + i * MINUTE))
        rig.send(task, task_id, tick_headers("Ahead", T0 + i * MINUTE))  # a duplicate
    wait_until(lambda: len(rig.rows()) >= len(ids) and rig.drained(), 60, "20 runs, drained")
    runs = SqlRunStore(rig.store_url)
    try:
        records = wait_until(
            lambda: _all_ended(runs, ids), 30, "every run state succeeded in the store"
        )
    finally:
        runs.close()
    assert sorted(r["id"] for r in rig.rows()) == sorted(ids)  # each once, duplicates refused
    main_pid = str(worker.proc.pid)
    ran_in = {r["id"]: str(r["pid"]) for r in rig.rows()}
    ahead = pool == "prefork" and broker == "rabbitmq"
    for record in records:
        assert record.owner is not None
        claimed_in = record.owner.split(":")[-2]
        assert claimed_in == (main_pid if ahead else ran_in[record.task_id])
    if pool == "prefork":
        assert main_pid not in ran_in.values()


def _all_ended(runs: SqlRunStore, ids: list[str]) -> list[RunRecord]:
    """The run rows of ``ids`` once every one is ``succeeded``; empty until then."""
    records = [runs.get_run(task_id) for task_id in ids]
    ended = [r for r in records if r is not None and r.state is RunState.SUCCEEDED]
    return ended if len(ended) == len(ids) else []
