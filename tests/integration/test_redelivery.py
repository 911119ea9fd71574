"""Lost ticks are sent again, backlogs never multiplied (SPEC §6, issue 24 item 2).

Real processes on real services: a beat with ``durable_beat_redeliver_after`` set, workers with
``install(app)``, PostgreSQL for the store, Redis (or RabbitMQ) as the broker. Each loss test takes
messages away from the broker after beat recorded them ``enqueued`` and proves each of them runs
exactly once, its history showing the redelivery (trigger ``redeliver``); the backlog test keeps
the workers away for several times ``redeliver_after`` while ticks queue and proves nothing is
sent twice: the broker never held two copies of one tick, and every tick runs once.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from celery_durable_beat.model import Outcome, Trigger
from celery_durable_beat.store.sql import SqlStore
from tests.support.procs import ThrowawayRedis, wait_until
from tests.support.rig import ProcessRig, rig_factory

pytestmark = pytest.mark.integration

AFTER_S = 1.0
SCHEDULE = {"every-second": {"task": "procapp.late_record", "schedule": "@every 1s"}}


@pytest.fixture
def make_rig(tmp_path: Path) -> Iterator[Any]:
    with rig_factory(tmp_path, ProcessRig) as make:
        yield make


def redis_rig(make: Any, store_url: str, broker: str) -> ProcessRig:
    rig: ProcessRig = make(
        store_url,
        broker,
        schedule=SCHEDULE,
        poll=0.2,
        redeliver_after=AFTER_S,
        visibility_timeout=30,
    )
    return rig


def task_ids(raw: list[bytes]) -> list[str]:
    """The task ids of stored kombu Redis messages."""
    return [json.loads(item)["headers"]["id"] for item in raw]


def recorded_before(rig: ProcessRig, ids: list[str], instant_ms: int) -> list[str]:
    """Those of ``ids`` whose first ``enqueued`` record was written before ``instant_ms``: the
    messages lost then. (A tick whose round failed after its publish — a confirm that timed
    out — is published again by the next round, recorded after it: that copy is not lost.)"""
    wanted = set(ids)
    return sorted(
        e.task_id
        for e in enqueued(rig, Trigger.AUTO)
        if e.task_id in wanted and e.recorded_at_ms < instant_ms
    )


def take_all(rig: ProcessRig) -> list[str]:
    """Delete the queue's list, atomically reading what it held: the messages lost."""
    with rig.redis.pipeline(transaction=True) as pipe:
        pipe.lrange(rig.queue, 0, -1)
        pipe.delete(rig.queue)
        held, _ = pipe.execute()
    store = SqlStore(rig.store_url)
    try:
        return recorded_before(rig, task_ids(held), store.now_ms())
    finally:
        store.close()


def enqueued(rig: ProcessRig, trigger: Trigger) -> list[Any]:
    return [
        e
        for e in rig.history("every-second")
        if e.outcome is Outcome.ENQUEUED and e.trigger is trigger
    ]


def assert_each_ran_once(rig: ProcessRig, lost: list[str]) -> None:
    """Every lost tick ran, none of any tick twice; history shows each redelivery."""
    wait_until(lambda: set(lost) <= {r["id"] for r in rig.rows("run")}, 60, "the lost ticks")
    runs = Counter(r["id"] for r in rig.rows("run"))
    assert [t for t, n in runs.items() if n > 1] == []
    names = {r["periodic_task_name"] for r in rig.rows("run") if r["id"] in lost}
    assert names == {"every-second"}  # a copy is the tick's own message, this header included
    redelivered = {e.task_id for e in enqueued(rig, Trigger.REDELIVER)}
    missing = set(lost) - redelivered
    assert not missing, (
        [
            (e.trigger, e.outcome, e.reason, e.recorded_at_ms, e.detail)
            for e in rig.history("every-second")
            if e.task_id in missing
        ]
        + [r for r in rig.rows("run") if r["id"] in missing]
        + [lost]
    )
    firsts = Counter(e.task_id for e in enqueued(rig, Trigger.AUTO))
    assert all(firsts[t] == 1 for t in lost)  # one first record each, then the redeliveries


@pytest.mark.timeout(120)
def test_ticks_deleted_from_the_redis_queue_run_once_each_sent_again(
    make_rig: Any, pg_url: str, redis_url: str
) -> None:
    rig = redis_rig(make_rig, pg_url, redis_url)
    rig.beat()
    wait_until(lambda: rig.queued() >= 3, 30, "three ticks queued")
    lost = take_all(rig)
    assert lost
    rig.worker("prefork", 2)
    assert_each_ran_once(rig, lost)


@pytest.mark.timeout(150)
def test_a_redis_broker_restarted_without_persistence_loses_nothing_recorded(
    make_rig: Any, pg_url: str
) -> None:
    broker = ThrowawayRedis()  # --save "" --appendonly no: a restart forgets everything
    broker.start()
    try:
        rig = redis_rig(make_rig, pg_url, broker.url)
        rig.beat()
        wait_until(lambda: rig.queued() >= 3, 30, "three ticks queued")
        held = task_ids(rig.redis.lrange(rig.queue, 0, -1))
        broker.stop()
        lost = recorded_before(rig, held, 2**62)  # queued (no worker yet), then forgotten
        broker.start()
        rig.worker("prefork", 2)
        assert_each_ran_once(rig, lost)
    finally:
        broker.close()


@pytest.mark.timeout(120)
def test_a_backlog_is_never_multiplied(make_rig: Any, pg_url: str, redis_url: str) -> None:
    rig = redis_rig(make_rig, pg_url, redis_url)
    rig.beat()
    seen_twice: list[str] = []

    def queued_for(ticks: int) -> bool:
        """While ticks queue with no worker: the list never holds one tick twice."""
        ids = task_ids(rig.redis.lrange(rig.queue, 0, -1))
        seen_twice.extend(t for t, n in Counter(ids).items() if n > 1)
        return len(ids) >= ticks

    wait_until(lambda: queued_for(int(6 * AFTER_S) + 2), 40, "a backlog of 6 x redeliver_after")
    rig.worker("prefork", 2)
    wait_until(lambda: rig.queued() == 0 and queued_for(0), 60, "the backlog drained")
    published = {e.task_id for e in enqueued(rig, Trigger.AUTO)}
    wait_until(lambda: published <= {r["id"] for r in rig.rows("run")}, 60, "every tick run")
    assert seen_twice == []
    assert enqueued(rig, Trigger.REDELIVER) == []
    runs = Counter(r["id"] for r in rig.rows("run"))
    assert [t for t, n in runs.items() if n > 1] == []


@pytest.mark.timeout(150)
def test_a_purged_rabbitmq_queue_is_sent_again_on_fifo_evidence(
    make_rig: Any, pg_url: str, amqp_url: str, redis_url: str
) -> None:
    """RabbitMQ: no probe; the evidence is a later tick of the queue claimed long ago."""
    from kombu import Connection

    rig: ProcessRig = make_rig(
        pg_url,
        amqp_url,
        schedule=SCHEDULE,
        poll=0.2,
        redeliver_after=AFTER_S,
        queue=f"redeliver-{uuid.uuid4().hex[:8]}",
        lease_url=redis_url,
    )
    rig.beat()
    wait_until(lambda: rig.queued() >= 3, 30, "three ticks queued")
    lost = [e.task_id for e in enqueued(rig, Trigger.AUTO)]  # all queued: no worker yet
    with Connection(amqp_url) as conn:
        conn.default_channel.queue_purge(rig.queue)
    rig.worker("prefork", 2)
    assert_each_ran_once(rig, lost)
