"""Worker presence (SPEC §2 ``require_worker``, §8 ``status``): rule 8 of ``runs/base.py`` on
every tracking backend, and real ``celery worker`` / ``celery beat`` processes: a worker that
ran ``install(app)`` is listed with its queues, ``require_worker`` ticks reach a queue it
consumes and are skipped (``no_worker``) for one nobody consumes, and a worker that shut down
is forgotten."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.contrib.testing.worker import start_worker
from kombu import Queue

from celery_durable_beat import DurableBeat, install
from celery_durable_beat.clock import Clock
from celery_durable_beat.runs.base import RunTracking, WorkerSeen
from celery_durable_beat.runs.memory import MemoryRuns
from celery_durable_beat.runs.sql import SqlRunStore
from celery_durable_beat.store.sql import SqlStore
from tests.support.procs import wait_until
from tests.support.rig import ProcessRig, ensure_schema, rig_factory

pytestmark = pytest.mark.integration

HOUR_MS = 3_600_000


@pytest.fixture(params=["sql-sqlite", "sql-postgresql", "memory"])
def tracking(request: pytest.FixtureRequest) -> Iterator[RunTracking]:
    """Every run tracking backend, on an empty store."""
    backend: RunTracking
    if request.param == "memory":
        backend = MemoryRuns()
    else:
        url = str(request.getfixturevalue("sqlite_url" if "sqlite" in request.param else "pg_url"))
        ensure_schema(url)
        backend = SqlRunStore(url)
    yield backend
    backend.close()


def backend_now(tracking: RunTracking) -> int:
    """The clock the backend stamps ``last_seen_ms`` with."""
    if isinstance(tracking, SqlRunStore):
        store = SqlStore(tracking.url)
        try:
            return store.now_ms()
        finally:
            store.close()
    clock: Clock = tracking.clock  # type: ignore[attr-defined]
    return clock.now_ms()


# -- rule 8 -------------------------------------------------------------------------------------


def test_an_announced_worker_is_live_with_its_queues_on_the_backends_clock(
    tracking: RunTracking,
) -> None:
    before = backend_now(tracking)
    tracking.announce_worker("w2@host", ["reports", "celery"])
    tracking.announce_worker("w1@host", [])
    after = backend_now(tracking)
    seen = tracking.live_workers(HOUR_MS)
    assert [(w.hostname, w.queues) for w in seen] == [
        ("w1@host", ()),
        ("w2@host", ("reports", "celery")),
    ]
    assert all(isinstance(w, WorkerSeen) and before <= w.last_seen_ms <= after for w in seen)


def test_announcing_again_replaces_the_queues_and_moves_last_seen(tracking: RunTracking) -> None:
    tracking.announce_worker("w1@host", ["a"])
    first = tracking.live_workers(HOUR_MS)[0].last_seen_ms
    wait_until(lambda: backend_now(tracking) > first, 5, "the backend's clock to move")
    tracking.announce_worker("w1@host", ["b", "c"])
    (seen,) = tracking.live_workers(HOUR_MS)
    assert seen.queues == ("b", "c") and seen.last_seen_ms > first


def test_a_silent_worker_drops_out_after_the_ttl(tracking: RunTracking) -> None:
    tracking.announce_worker("w1@host", ["celery"])
    last = tracking.live_workers(HOUR_MS)[0].last_seen_ms
    wait_until(lambda: backend_now(tracking) > last + 20, 5, "20 ms on the backend's clock")
    assert tracking.live_workers(20) == []  # seen more than 20 ms ago
    assert [w.hostname for w in tracking.live_workers(HOUR_MS)] == ["w1@host"]


def test_a_forgotten_worker_is_gone_and_forgetting_twice_is_harmless(
    tracking: RunTracking,
) -> None:
    tracking.announce_worker("w1@host", ["celery"])
    tracking.announce_worker("w2@host", ["celery"])
    tracking.forget_worker("w1@host")
    tracking.forget_worker("w1@host")
    tracking.forget_worker("never@host")
    assert [w.hostname for w in tracking.live_workers(HOUR_MS)] == ["w2@host"]


# -- Celery's in-process worker (claims in the store) ---------------------------------------------


def test_an_in_process_worker_announces_its_queues_and_is_forgotten_when_it_stops(
    store_url: str,
) -> None:
    ensure_schema(store_url)
    app = Celery(f"inproc-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    app.conf.update(
        durable_beat_url=store_url,
        task_queues=[Queue("celery"), Queue("reports"), Queue("other")],
        worker_hijack_root_logger=False,
    )
    install(app)
    app.amqp.queues.select(["celery", "reports"])  # as ``celery worker -Q celery,reports``
    registry = SqlRunStore(store_url)
    try:
        with start_worker(app, pool="solo", perform_ping_check=False) as worker:
            (seen,) = wait_until(lambda: registry.live_workers(60_000), 20, "the announcement")
            assert (seen.hostname, seen.queues) == (worker.hostname, ("celery", "reports"))
        # The test worker stops cold (no ``worker_shutdown``): the consumer step forgets it.
        assert registry.live_workers(60_000) == []
    finally:
        registry.close()


# -- real processes -------------------------------------------------------------------------------


@pytest.fixture
def make_rig(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[Any]:
    """Rigs whose workers run ``install(app)`` and announce every 2 s (worker TTL 6 s)."""
    rig = partial(ProcessRig, store_url=pg_url, broker_url=redis_url, lease_ttl=3, worker_ttl=6)
    with rig_factory(tmp_path, rig) as make:
        yield make


def control(rig: ProcessRig) -> DurableBeat:
    app = Celery("reader", broker=rig.broker_url, set_as_current=False)
    app.conf.update(durable_beat_url=rig.store_url, durable_beat_worker_ttl=6)
    return DurableBeat(app)


def events(beat: DurableBeat, name: str) -> list[dict[str, Any]]:
    return [e.to_json() for e in beat.history(name, limit=100).events]


def outcomes(beat: DurableBeat, name: str, outcome: str, reason: str | None = None) -> int:
    return sum(1 for e in events(beat, name) if e["outcome"] == outcome and e["reason"] == reason)


def test_require_worker_follows_the_queues_live_workers_consume(make_rig: Any) -> None:
    rig = make_rig(routes={"procapp.sleepy": {"queue": "fast"}})
    worker = rig.worker("prefork", 2, flags=["-Q", "fast,celery"])
    registry = SqlRunStore(rig.store_url)
    beat = control(rig)
    try:
        (seen,) = wait_until(lambda: registry.live_workers(6000), 20, "the worker's announcement")
        assert seen.hostname.startswith("w0-") and seen.queues == ("celery", "fast")
        (listed,) = beat.status().workers
        assert (listed.hostname, listed.queues) == (seen.hostname, ("celery", "fast"))
        assert listed.last_seen.endswith("Z")

        every = {"schedule": "@every 1s", "require_worker": True}
        rig.beat(
            schedule={
                "served": {"task": "procapp.record", "options": {"queue": "fast"}, **every},
                "routed": {"task": "procapp.sleepy", "args": [0], **every},  # task_routes: fast
                "unserved": {"task": "procapp.record", "options": {"queue": "nobody"}, **every},
            }
        )
        wait_until(
            lambda: {"served", "routed"} <= {r["schedule"] for r in rig.rows()},
            30,
            "runs of the served and the routed schedules",
        )
        wait_until(lambda: outcomes(beat, "unserved", "skipped", "no_worker") >= 2, 20, "skips")
        assert outcomes(beat, "unserved", "enqueued") == 0
        assert "unserved" not in {r["schedule"] for r in rig.rows()}
        assert outcomes(beat, "served", "skipped", "no_worker") == 0
        assert outcomes(beat, "routed", "skipped", "no_worker") == 0

        # The worker shuts down: it is forgotten at once, and its queue's ticks are skipped.
        assert worker.stop() == 0
        wait_until(lambda: not registry.live_workers(6000), 20, "the worker to be forgotten")
        assert beat.status().workers == ()
        wait_until(lambda: outcomes(beat, "served", "skipped", "no_worker"), 20, "a served skip")
    finally:
        beat.close()
        registry.close()
