"""One worker pool serving several apps (SPEC §16): the guard claims each tick in the namespace
its id names (rule 9 of ``runs/base.py``), whatever the worker's own ``durable_beat_namespace``.

A real ``celery worker`` whose app sets no namespace (``tests/support/procapp.py``, which runs
``install(app)``) receives the tick messages of the namespaces ``alpha`` and ``beta`` with the
same schedule name and instant, as their beats build them (``message.build_message``,
``message.tick_headers``), once with its claims in Redis (a Redis broker) and once in the store
(RabbitMQ): each tick runs once, in its own namespace, and a duplicate of each is refused.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select

from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.message import TickMessage, build_message, tick_headers
from celery_durable_beat.model import Action, Definition
from celery_durable_beat.runs.base import RunState
from celery_durable_beat.runs.sql import SqlRunStore
from celery_durable_beat.schedules.spec import IntervalSpec
from celery_durable_beat.store.tables import runs
from tests.support.procs import wait_until
from tests.support.rig import ProcessRig, rig_factory

pytestmark = pytest.mark.integration

T0 = 1_780_000_000_000
NAME = "Nightly"
NAMESPACES = ("alpha", "beta")


@pytest.fixture(params=["claims in Redis", "claims in the store"])
def rig(request: pytest.FixtureRequest, tmp_path: Path, pg_url: str) -> Iterator[ProcessRig]:
    """A worker rig on a Redis broker (claims in Redis) or on RabbitMQ (claims in the store), on
    a queue of its own (the brokers are shared)."""
    broker = "redis_url" if request.param == "claims in Redis" else "amqp_url"
    queue = f"namespaces-{uuid.uuid4().hex[:8]}"
    with rig_factory(tmp_path, ProcessRig) as make:
        yield make(pg_url, request.getfixturevalue(broker), queue=queue)


def tick_of(namespace: str) -> TickMessage:
    """``NAME``'s tick at ``T0`` as the beat of ``namespace`` builds it."""
    definition = Definition(name=NAME, task="procapp.record", spec=IntervalSpec(60_000))
    task_id = tick_task_id(NAME, T0, namespace)
    return build_message(NAME, definition, T0, task_id, namespace=namespace)


def send(rig: ProcessRig, message: TickMessage) -> None:
    rig.send(message.task, message.task_id, tick_headers(message))


def run_state(rig: ProcessRig, namespace: str | None, task_id: str) -> RunState | None:
    """The run state as the beat of ``namespace`` reads it."""
    tracking = SqlRunStore(rig.store_url, namespace=namespace)
    try:
        record = tracking.get_run(task_id)
    finally:
        tracking.close()
    return None if record is None else record.state


def stored_namespaces(url: str) -> dict[str, str]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return dict(conn.execute(select(runs.c.task_id, runs.c.namespace)).all())
    finally:
        engine.dispose()


def test_one_worker_runs_each_namespaces_tick_once(rig: ProcessRig) -> None:
    worker = rig.worker("threads", 2)
    ticks = [tick_of(ns) for ns in NAMESPACES]
    ids = [tick.task_id for tick in ticks]
    assert ids[0].removeprefix("alpha:") == ids[1].removeprefix("beta:") == tick_task_id(NAME, T0)
    for tick in ticks:
        send(rig, tick)
    wait_until(
        lambda: all(run_state(rig, t.namespace, t.task_id) is RunState.SUCCEEDED for t in ticks),
        30,
        "both ticks run and recorded succeeded, each in its namespace",
    )
    assert sorted(r["id"] for r in rig.rows("run")) == sorted(ids)
    assert {(r["schedule"], r["tick_ms"]) for r in rig.rows("run")} == {(NAME, T0)}
    for tick in ticks:  # a duplicate of each
        send(rig, tick)
    refused = wait_until(
        lambda: len(found := worker.actions(Action.DUPLICATE_REFUSED.value)) >= 2 and found,
        30,
        "both duplicates refused",
    )
    assert sorted(r["message"].split()[3] for r in refused) == sorted(ids)
    assert sorted(r["id"] for r in rig.rows("run")) == sorted(ids)  # still once each
    _assert_kept_apart(rig, ids)


def _assert_kept_apart(rig: ProcessRig, ids: list[str]) -> None:
    """Each run lives in its namespace: the rows' namespace column, the Redis keys; the default
    namespace (the worker's own) sees none of them."""
    assert {k: v for k, v in stored_namespaces(rig.store_url).items() if k in ids} == {
        ids[0]: "alpha",
        ids[1]: "beta",
    }
    assert all(run_state(rig, None, task_id) is None for task_id in ids)
    assert run_state(rig, "beta", ids[0]) is None and run_state(rig, "alpha", ids[1]) is None
    if rig.broker_url.startswith("redis"):
        for namespace, task_id in zip(NAMESPACES, ids, strict=True):
            value: Any = rig.redis.get(f"durable_beat:{namespace}:run:{task_id}")
            assert value is not None and value.startswith(b"succeeded|0|")
            assert rig.redis.exists(f"durable_beat:{namespace}:claimed:{task_id}")
        assert not [k for k in rig.redis.keys("durable_beat:run:*") if b"nightly" in k]
        # The shared counters are the worker's own namespace's (the default).
        assert rig.shared_counters().get("duplicates_refused", 0) >= 2
        assert not rig.redis.exists("durable_beat:alpha:counters", "durable_beat:beta:counters")


def test_a_header_that_disagrees_with_the_id_is_counted_and_the_id_decides(
    sqlite_url: str,
) -> None:
    """The id is what every claim of the tick dedups on: a delivery whose
    ``periodic_namespace`` names another namespace than its id (no beat sends one) is claimed
    under the id's, and counted."""
    from celery import Celery

    from celery_durable_beat import install
    from celery_durable_beat.worker import counters, hooks
    from tests.support.rig import ensure_schema

    ensure_schema(sqlite_url)
    app = Celery(f"ns-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    app.conf.update(durable_beat_url=sqlite_url, task_ignore_result=True)
    install(app)

    @app.task(name="ns.record", shared=False)
    def record() -> None:
        """Never run: the test claims its tick by hand."""

    alpha = tick_of("alpha")
    headers = {**tick_headers(alpha), "periodic_namespace": "beta"}
    assert hooks.claim_request(record, {"id": alpha.task_id, "hostname": "w", **headers})
    plain = tick_task_id(NAME, T0)
    assert hooks.claim_request(record, {"id": plain, "hostname": "w", **headers})
    assert not hooks.claim_request(record, {"id": plain, "hostname": "w", **tick_headers(alpha)})
    assert counters(app)["namespace_mismatch"] == 3
    assert counters(app)["duplicates_refused"] == 1
    assert stored_namespaces(sqlite_url) == {alpha.task_id: "alpha", plain: ""}
    for key in [k for k in hooks._ENTERED if k[0] in (alpha.task_id, plain)]:
        hooks._ENTERED.pop(key)
    runtime = hooks._installation(app).runtime()  # type: ignore[union-attr]
    runtime.close()
