"""The worker side (SPEC §6) with real workers: ``install(app)``, ``periodic_origin``, the dedup
guard, run tracking and overlap.

Two kinds of worker: Celery's in-process test worker on the ``memory://`` broker, where claims
live in the store (no Redis is configured), and real ``celery worker`` / ``celery beat``
processes on a Redis broker, where claims live in Redis, for every pool and for crashes.
"""

from __future__ import annotations

import itertools
import json
import logging
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest
from celery import Celery, Task
from celery.contrib.testing.worker import start_worker
from kombu import serialization

from celery_durable_beat import DurableBeat, install, periodic_origin
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.model import Action, Trigger
from celery_durable_beat.runs.base import RunRecord, RunState
from celery_durable_beat.runs.redis import RedisClaims
from celery_durable_beat.runs.sql import SqlRunStore
from celery_durable_beat.worker import counters
from tests.conftest import PG_ADMIN_URL
from tests.support.procs import CeleryProcess, wait_until
from tests.support.rig import ProcessRig, ensure_schema, rig_factory, run_row, tick_headers

pytestmark = pytest.mark.integration

T0 = 1_780_000_000_000


# -- periodic_origin ----------------------------------------------------------------------------


def test_periodic_origin_reads_the_headers() -> None:
    origin = periodic_origin({"headers": tick_headers("Nightly", T0 + 5)})
    assert origin is not None
    assert (origin.schedule, origin.tick_ms, origin.trigger) == ("Nightly", T0 + 5, Trigger.AUTO)
    assert origin.tick.isoformat() == "2026-05-28T20:26:40.005000+00:00"
    manual = periodic_origin(tick_headers("n", T0, "manual"))
    assert manual is not None and manual.trigger == "manual"


@pytest.mark.parametrize(
    "request_",
    [
        None,
        {},
        {"periodic_schedule": "n"},
        {"periodic_tick_ms": T0},
        {"periodic_schedule": "n", "periodic_tick_ms": "soon"},
        {"periodic_schedule": "n", "periodic_tick_ms": True},
        tick_headers("n", T0, "sometimes"),
    ],
)
def test_periodic_origin_is_none_for_ordinary_requests(request_: Any) -> None:
    assert periodic_origin(request_) is None


# -- in-process worker, claims in the store -------------------------------------------------------


def make_app(store_url: str, **conf: Any) -> Celery:
    app = Celery(f"inproc-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    app.conf.update(
        task_ignore_result=True,
        durable_beat_url=store_url,
        broker_transport_options={"polling_interval": 0.05},
        worker_hijack_root_logger=False,
        **conf,
    )
    install(app)
    return app


class Journal:
    """What the tasks of an in-process app did, in order."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(self, task: Any, event: str) -> None:
        origin = periodic_origin(task.request)
        self.rows.append(
            {"event": event, "id": task.request.id, "tick_ms": origin.tick_ms if origin else None}
        )

    def ids(self, event: str = "run") -> list[str]:
        return [r["id"] for r in self.rows if r["event"] == event]


def register(app: Celery, journal: Journal) -> dict[str, Any]:
    @app.task(name="inproc.record", bind=True, shared=False)
    def record(self: Any) -> None:
        journal.add(self, "run")

    @app.task(name="inproc.sleepy", bind=True, shared=False)
    def sleepy(self: Any, seconds: float) -> None:
        journal.add(self, "run")
        time.sleep(seconds)  # the task's own work (a long run), not a wait of the test
        journal.add(self, "end")

    class PlainBase(Task):  # type: ignore[misc]
        """A base of the user's own, overriding before_start without calling super()."""

        def before_start(self, task_id: str, args: Any, kwargs: Any) -> None:
            journal.rows.append({"event": "user_before_start", "id": task_id})

    @app.task(name="inproc.custom", bind=True, base=PlainBase, shared=False)
    def custom(self: Any) -> None:
        journal.add(self, "run")

    return {"record": record, "sleepy": sleepy, "custom": custom}


def test_ordinary_tasks_never_build_the_guard(store_url: str) -> None:
    ensure_schema(store_url)
    app = make_app(store_url)
    journal = Journal()
    tasks = register(app, journal)
    with start_worker(app, pool="solo", perform_ping_check=False):
        for _ in range(3):
            tasks["record"].delay()
        wait_until(lambda: len(journal.ids()) == 3, 20, "3 ordinary runs")
        assert counters(app) == {}  # no claim, no run state: only the worker's presence row
        tasks["record"].apply_async(task_id=tick_task_id("n", T0), headers=tick_headers("n", T0))
        wait_until(lambda: len(journal.ids()) == 4, 20, "the tick's run")
    assert counters(app)["claimed"] == 1


@pytest.mark.parametrize("pool", ["threads", "solo"])
def test_store_claims_run_a_duplicated_tick_once(
    store_url: str, pool: str, caplog: pytest.LogCaptureFixture
) -> None:
    ensure_schema(store_url)
    app = make_app(store_url)
    journal = Journal()
    tasks = register(app, journal)
    task_id, headers = tick_task_id("Nightly", T0), tick_headers("Nightly", T0)
    caplog.set_level(logging.INFO, logger="celery_durable_beat.worker")
    with start_worker(app, pool=pool, concurrency=4, perform_ping_check=False):
        for _ in range(5):
            tasks["sleepy"].apply_async((0.5,), task_id=task_id, headers=headers)
        tasks["custom"].apply_async(task_id=tick_task_id("n", T0), headers=tick_headers("n", T0))
        tasks["custom"].apply_async(task_id=tick_task_id("n", T0), headers=tick_headers("n", T0))
        wait_until(lambda: counters(app).get("duplicates_refused") == 5, 30, "5 refusals")
        wait_until(lambda: run_row(store_url, task_id) is RunState.SUCCEEDED, 20, "succeeded")
    assert journal.ids() == [task_id, tick_task_id("n", T0)] or sorted(journal.ids()) == sorted(
        [task_id, tick_task_id("n", T0)]
    )
    # The guard runs before the user's own before_start, on a base class of the user's own.
    assert [r for r in journal.rows if r["event"] == "user_before_start"] == [
        {"event": "user_before_start", "id": tick_task_id("n", T0)}
    ]
    refusals = [r for r in caplog.records if getattr(r, "action", None) == "duplicate_refused"]
    assert len(refusals) == 5
    assert all(
        task_id in r.getMessage() or tick_task_id("n", T0) in r.getMessage() for r in refusals
    )


@pytest.mark.parametrize("claims_in", ["the store", "Redis"])
def test_a_duplicate_discarded_as_expired_leaves_the_runs_state_alone(
    store_url: str, redis_url: str, claims_in: str
) -> None:
    # Celery's main process discards an expired delivery before the guard sees it (task_revoked
    # with expired); a duplicate of a tick that ran (a replay, a restored Redis message) must
    # not turn its succeeded into expired. A tick that never ran is recorded expired.
    ensure_schema(store_url)
    app = make_app(
        store_url, **({"durable_beat_lease_url": redis_url} if claims_in == "Redis" else {})
    )
    tasks = register(app, Journal())
    # Names of their own: Celery remembers a discarded id as revoked for the whole process.
    first, other = f"ran-{uuid.uuid4().hex[:6]}", f"never-{uuid.uuid4().hex[:6]}"
    ran, never = tick_task_id(first, T0), tick_task_id(other, T0)
    past = datetime.now(timezone.utc) - timedelta(minutes=1)
    with start_worker(app, pool="solo", perform_ping_check=False):
        tasks["record"].apply_async(task_id=ran, headers=tick_headers(first, T0))
        wait_until(lambda: run_row(store_url, ran) is RunState.SUCCEEDED, 20, "the run")
        tasks["record"].apply_async(task_id=ran, headers=tick_headers(first, T0), expires=past)
        tasks["record"].apply_async(task_id=never, headers=tick_headers(other, T0), expires=past)
        # Discarded in order by the one main process: once the second is recorded, the first
        # has been written (or refused) before it.
        wait_until(lambda: run_row(store_url, never) is RunState.EXPIRED, 20, "never: expired")
    assert run_row(store_url, ran) is RunState.SUCCEEDED
    if claims_in == "Redis":
        claims = RedisClaims(redis_url)
        assert claims.state(ran) is RunState.SUCCEEDED  # the claim too: still refuses it
        assert claims.state(never) is RunState.EXPIRED
        claims.close()


def test_a_traced_deliverys_clean_up_leaves_another_threads_claim_alone() -> None:
    # A threads pool: a retry (same task id) is claimed in one thread while the tracer of its
    # first run still ends in another; that clean-up must not drop the retry's claim, which
    # its before_start then would not find (it would claim again, be refused, and raise Ignore
    # after task_prerun, the orphaned claim heartbeated as long as the process lives).
    from celery_durable_beat.worker import hooks

    task_id = tick_task_id("Retried", T0)
    retry_claim = object()
    key: list[tuple[str, int]] = []

    def claimed_in_another_thread() -> None:
        key.append(hooks._entered_key(task_id))
        hooks._ENTERED[key[0]] = retry_claim  # type: ignore[assignment]

    thread = threading.Thread(target=claimed_in_another_thread)
    thread.start()
    thread.join()
    try:
        hooks.forget_request(None, {"id": task_id})  # the first run's tracer ends, here
        assert hooks._ENTERED.get(key[0]) is retry_claim
    finally:
        hooks._ENTERED.pop(key[0], None)


def test_a_claim_the_task_never_took_over_is_given_back(store_url: str) -> None:
    # The tracer may return before before_start (task_track_started with a result backend that
    # fails to store STARTED; worker_deduplicate_successful_tasks): nothing ran, so the claim
    # taken in front of the tracer is given back, not left started and heartbeated.
    from celery_durable_beat.worker import hooks

    ensure_schema(store_url)
    app = make_app(store_url)
    task = register(app, Journal())["record"]
    task_id = tick_task_id(f"early-{uuid.uuid4().hex[:6]}", T0)
    request = {"id": task_id, "hostname": "w", **tick_headers(task_id.split("@")[0], T0)}
    assert hooks.claim_request(task, request)
    assert run_row(store_url, task_id) is RunState.STARTED
    hooks.forget_request(task, request)  # the tracer returned: before_start never ran
    runtime = hooks._installation(app).runtime()  # type: ignore[union-attr]
    runtime.flush()
    assert runtime.held() == []  # no longer heartbeated
    row = run_row_record(store_url, task_id)
    assert row is not None and row.state is RunState.UNKNOWN  # given back: expired at once
    assert row.expires_at_ms <= row.updated_at_ms


@pytest.fixture
def late_pg_url() -> Iterator[str]:
    """The URL of a PostgreSQL database created only when the test says so (an outage)."""
    name = f"dbt_late_{uuid.uuid4().hex[:12]}"
    base = PG_ADMIN_URL.rpartition("/")[0]
    yield f"{base}/{name}"
    with psycopg.connect(PG_ADMIN_URL.replace("+psycopg", ""), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # generated name


def test_store_down_the_tick_runs_and_its_state_is_recorded_late(
    late_pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(late_pg_url, durable_beat_run_ttl=1.5)
    journal = Journal()
    tasks = register(app, journal)
    quick, slow = tick_task_id("n", T0), tick_task_id("n", T0 + 1000)
    caplog.set_level(logging.INFO, logger="celery_durable_beat.worker")
    with start_worker(app, pool="threads", concurrency=2, perform_ping_check=False):
        tasks["record"].apply_async(task_id=quick, headers=tick_headers("n", T0))
        tasks["sleepy"].apply_async((9,), task_id=slow, headers=tick_headers("n", T0 + 1000))
        wait_until(lambda: set(journal.ids()) == {quick, slow}, 20, "both ticks running")
        with psycopg.connect(PG_ADMIN_URL.replace("+psycopg", ""), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{late_pg_url.rpartition("/")[2]}"')
        ensure_schema(late_pg_url)
        # Once the store answers (circuit: 5 s), the pending states are written.
        wait_until(lambda: run_row(late_pg_url, slow) is RunState.UNKNOWN, 15, "slow: unknown")
        assert run_row(late_pg_url, quick) is RunState.SUCCEEDED
        wait_until(lambda: run_row(late_pg_url, slow) is RunState.SUCCEEDED, 15, "slow: done")
    outage = [r for r in caplog.records if getattr(r, "action", None) == "run_tracking_unavailable"]
    assert len(outage) == 1, [r.getMessage() for r in outage]
    assert counters(app)["unclaimed"] == 2


# -- real worker processes, claims in Redis ----------------------------------------------------


@pytest.fixture
def make_rig(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[Any]:
    """Rigs whose workers run ``install(app)``; a beat's lease lives 3 s."""
    rig = partial(ProcessRig, store_url=pg_url, broker_url=redis_url, lease_ttl=3)
    with rig_factory(tmp_path, rig) as make:
        yield make


@pytest.mark.parametrize("pool", ["prefork", "threads", "solo"])
def test_duplicate_deliveries_of_a_tick_execute_once(make_rig: Any, pool: str) -> None:
    rig = make_rig()
    worker = rig.worker(pool, 2)
    task_id = tick_task_id("Nightly", T0)
    for _ in range(4):
        rig.send("procapp.record", task_id, tick_headers("Nightly", T0))
    rig.send("procapp.record", None, None)  # an ordinary task
    wait_until(lambda: len(rig.rows()) == 2 and rig.drained(), 30, "2 runs, queue drained")
    tick, ordinary = sorted(rig.rows(), key=lambda r: r["schedule"] is None)
    assert tick["id"] == task_id
    assert (tick["schedule"], tick["tick_ms"], tick["trigger"]) == ("Nightly", T0, "auto")
    assert tick["tick"] == "2026-05-28T20:26:40+00:00"
    assert ordinary["schedule"] is None
    wait_until(lambda: rig.state(task_id) is RunState.SUCCEEDED, 20, "run state succeeded")
    assert rig.shared_counters()["duplicates_refused"] == 3
    refused = [line for line in worker.output().splitlines() if "not executed" in line]
    assert len(refused) == 3 and all(task_id in line for line in refused)
    # Long after, the same tick delivered again is still refused (dedup TTL).
    rig.send("procapp.record", task_id, tick_headers("Nightly", T0))
    wait_until(lambda: rig.shared_counters()["duplicates_refused"] == 4, 20, "a 4th refusal")
    assert len(rig.rows()) == 2


def test_a_retried_tick_runs_each_retry(make_rig: Any) -> None:
    rig = make_rig()
    rig.worker("threads", 2)
    task_id = tick_task_id("Flaky", T0)
    rig.send("procapp.flaky", task_id, tick_headers("Flaky", T0), args=(2, 1.5))
    wait_until(lambda: rig.state(task_id) is RunState.RETRIED, 20, "run state retried")
    rig.send("procapp.flaky", task_id, tick_headers("Flaky", T0), args=(2, 1.5))  # duplicate
    wait_until(lambda: rig.state(task_id) is RunState.SUCCEEDED, 30, "run state succeeded")
    assert [r["retries"] for r in rig.rows()] == [0, 1, 2]
    assert all(r["id"] == task_id for r in rig.rows())


def test_a_failing_tick_is_recorded_failed(make_rig: Any) -> None:
    rig = make_rig()
    rig.worker("prefork", 2)
    broken = tick_task_id("Broken", T0)
    rig.send("procapp.broken", broken, tick_headers("Broken", T0))
    wait_until(lambda: rig.state(broken) is RunState.FAILED, 20, "broken: failed")


# -- a hard time limit, before and after the guard's claim (worker/time_limits.py) -------------

STALL_SERIALIZER, STALL_CONTENT_TYPE = "procapp-stall", "application/x-procapp-stall"
"""procapp's serializer whose decoding stalls a pool process before the tracer (and the guard's
claim) is reached; the sender only encodes (JSON)."""
serialization.register(
    STALL_SERIALIZER,
    json.dumps,
    json.loads,
    content_type=STALL_CONTENT_TYPE,
    content_encoding="utf-8",
)


@pytest.fixture(params=["claims in Redis", "claims in the store"])
def limit_rig(request: pytest.FixtureRequest, tmp_path: Path, pg_url: str) -> Iterator[ProcessRig]:
    """A rig on a Redis broker (claims in Redis) or on RabbitMQ (claims in the store)."""
    with rig_factory(tmp_path, ProcessRig) as make:
        if request.param == "claims in Redis":
            yield make(pg_url, request.getfixturevalue("redis_url"))
        else:
            queue = f"limit-{uuid.uuid4().hex[:8]}"
            yield make(pg_url, request.getfixturevalue("amqp_url"), queue=queue)


def _trigger_with_limit(rig: ProcessRig, name: str, task: str, **options: Any) -> str:
    """A manual run of a schedule of ``task`` with a 1 s hard time limit (recorded ``enqueued``,
    so history shows it); its task id."""
    app = Celery("operator", broker=rig.broker_url, set_as_current=False)
    app.conf.durable_beat_url = rig.store_url
    with DurableBeat(app) as control:
        options = {"time_limit": 1, "queue": rig.queue, **options}
        entry = {"task": task, "schedule": "0 3 * * *", "args": [60], "options": options}
        control.upsert(name, entry)
        return control.trigger(name).task_id


def _assert_recorded_failed_once(
    rig: ProcessRig, worker: CeleryProcess, name: str, task_id: str
) -> None:
    wait_until(lambda: rig.state(task_id) is RunState.FAILED, 30, "the tick recorded failed")
    worker.wait_for("exited with 'signal", 30)  # killed after Celery's on_timeout returned
    record = run_row_record(rig.store_url, task_id)
    assert record is not None and record.owner == "worker:time_limit"  # the reason
    if rig.broker_url.startswith("redis"):  # the claim, in Redis, settled alike
        assert rig.redis.get(f"durable_beat:run:{task_id}") == b"failed|0|worker:time_limit"
    limits = worker.actions(Action.TIME_LIMIT.value)
    assert len(limits) == 1 and task_id in limits[0]["message"], limits
    (event,) = [e for e in rig.history(name) if e.task_id == task_id]
    assert (event.outcome.value, event.trigger.value, event.run_state) == (
        "enqueued",
        "manual",
        "failed",
    )
    assert "Hard time limit (1" in worker.output()
    assert not rig.rows("end")


def run_row_record(url: str, task_id: str) -> RunRecord | None:
    runs = SqlRunStore(url)
    try:
        return runs.get_run(task_id)
    finally:
        runs.close()


def test_a_hard_time_limit_after_the_claim_is_recorded_failed(limit_rig: ProcessRig) -> None:
    """The main process holds the limit back until the run started: claimed, then killed."""
    rig = limit_rig
    worker = rig.worker("prefork", 1)
    task_id = _trigger_with_limit(rig, "Claimed", "procapp.started_sleepy")
    (start,) = wait_until(lambda: rig.rows("start"), 30, "the run to start")
    assert start["id"] == task_id
    _assert_recorded_failed_once(rig, worker, "Claimed", task_id)
    assert [r["id"] for r in rig.signals("task_prerun")] == [task_id]


def test_a_hard_time_limit_before_the_claim_is_recorded_failed(limit_rig: ProcessRig) -> None:
    """The pool process stalls decoding the message, before the tracer: never claimed."""
    rig = limit_rig
    worker = rig.worker("prefork", 1)
    task_id = _trigger_with_limit(rig, "Unclaimed", "procapp.sleepy", serializer=STALL_SERIALIZER)
    wait_until(lambda: rig.rows("decoding"), 30, "the pool process to accept the job")
    _assert_recorded_failed_once(rig, worker, "Unclaimed", task_id)
    assert not rig.rows("start") and not rig.signals("task_prerun")  # the body never ran


def _late_tick(
    make_rig: Any, visibility: float, processes: int, name: str, seconds: float
) -> tuple[ProcessRig, CeleryProcess, str]:
    """An acks-late tick of ``seconds`` sent to a prefork worker whose broker gives unacked
    messages back after ``visibility`` seconds (run TTL 2 s); the rig, worker and task id."""
    rig = make_rig(visibility_timeout=visibility, run_ttl=2)
    worker = rig.worker("prefork", processes)
    task_id = tick_task_id(name, T0)
    rig.send("procapp.late_sleepy", task_id, tick_headers(name, T0), args=(seconds,))
    return rig, worker, task_id


def test_an_acks_late_redelivery_after_its_worker_died_runs(make_rig: Any) -> None:
    rig, first, task_id = _late_tick(make_rig, 3, 1, "Late", 3)
    wait_until(lambda: rig.rows("start"), 20, "the first run to start")
    first.signal(signal.SIGKILL)
    first.kill()  # the whole process group: main process and pool child, mid-task
    assert rig.redis.hlen("unacked") == 1
    rig.worker("solo")
    wait_until(lambda: rig.rows("end"), 40, "the redelivered run to finish")
    assert [r["event"] for r in rig.rows()] == ["start", "start", "end"]
    # The run state is committed by the worker's background flusher after the body's last row.
    wait_until(lambda: rig.state(task_id) is RunState.SUCCEEDED, 10, "its end recorded")


def test_a_redelivery_while_the_first_run_is_alive_is_refused(make_rig: Any) -> None:
    # visibility_timeout shorter than the task: Redis gives the message back while it runs.
    rig, worker, _ = _late_tick(make_rig, 2, 2, "Long", 8)
    wait_until(lambda: rig.rows("end"), 30, "the run to finish")
    worker.wait_action(Action.DUPLICATE_REFUSED.value, 20)  # a refused redelivery
    # Every delivery acked and none queued: no redelivery is left that could still run.
    wait_until(rig.drained, 20, "every delivery of the tick acked")
    assert [r["event"] for r in rig.rows()] == ["start", "end"]


# -- overlap with a real beat ---------------------------------------------------------------------


def _sleepy_beat(rig: ProcessRig, name: str, every: str, seconds: float, overlap: str) -> None:
    """A worker with 3 processes and a beat firing ``procapp.sleepy(seconds)`` ``every``."""
    rig.worker("prefork", 3)
    schedule = {"task": "procapp.sleepy", "schedule": every, "args": [seconds], "overlap": overlap}
    rig.beat(schedule={name: schedule})


def _spans(rig: ProcessRig) -> list[tuple[float, float]]:
    """(start, end) of each run, by start; a run still going ends at infinity."""
    starts = {r["id"]: r["t"] for r in rig.rows("start")}
    ends = {r["id"]: r["t"] for r in rig.rows("end")}
    return sorted((starts[i], ends.get(i, float("inf"))) for i in starts)


def test_overlap_skip_never_runs_two_ticks_at_once(make_rig: Any) -> None:
    rig = make_rig()
    _sleepy_beat(rig, "slow", "@every 1s", 2.5, "skip")
    wait_until(lambda: len(rig.rows("end")) >= 3, 60, "3 finished runs")
    spans = _spans(rig)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans
    events = rig.history("slow")
    assert any(e.outcome.value == "skipped" and e.reason == "overlap" for e in events)
    ends = {r["id"] for r in rig.rows("end")}
    # A run's end reaches tracking after the task wrote its ``end`` row (the guard's background
    # commit, GATHER_S later): wait for the states instead of reading them at once.
    wait_until(lambda: _all_succeeded(rig, "slow", ends), 10, "the finished runs succeeded")


def _all_succeeded(rig: ProcessRig, name: str, task_ids: set[str]) -> bool:
    """Whether history has each of ``task_ids`` (at least one) with run state ``succeeded``."""
    found = [e for e in rig.history(name) if e.task_id in task_ids]
    return bool(found) and all(e.run_state == "succeeded" for e in found)


def test_overlap_skip_holds_when_the_round_fails_after_its_publish(make_rig: Any) -> None:
    """The beat stops inside its first settle (its tick published) until PostgreSQL ends the
    session (idle in transaction past the 3 s lease TTL): the round fails with the tick out and
    unrecorded, and the retry, over an interval later, fires a later tick (``missed: skip``)."""
    rig = make_rig()
    rig.worker("prefork", 3)
    entry = {"task": "procapp.sleepy", "schedule": "@every 1s", "args": [6], "overlap": "skip"}
    beat = rig.beat(schedule={"slow": entry}, fault="fenced_write:1:stop")
    beat.wait_for("durable-beat fault stopped at fenced_write", 30)
    database = rig.store_url.rpartition("/")[2]
    wait_until(lambda: not _idle_in_transaction(database), 30, "the frozen settle cut off")
    beat.signal(signal.SIGCONT)
    beat.wait_action(Action.TICK_UNRECORDED.value, 20)
    wait_until(lambda: len(rig.rows("start")) >= 2, 40, "a second run")
    spans = _spans(rig)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans


def _idle_in_transaction(database: str) -> int:
    """Sessions on ``database`` sitting in an open transaction."""
    with psycopg.connect(PG_ADMIN_URL.replace("+psycopg", "")) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
            " AND state = 'idle in transaction'",
            (database,),
        ).fetchone()
    return int(row[0]) if row else 0


def test_overlap_replace_terminates_the_unfinished_run(make_rig: Any) -> None:
    rig = make_rig()
    _sleepy_beat(rig, "long", "@every 2s", 60, "replace")
    wait_until(lambda: len(rig.rows("start")) >= 3, 60, "3 runs started")
    revoked = wait_until(
        lambda: [e for e in rig.history("long") if e.run_state == "revoked"],
        20,
        "revoked runs in history",
    )
    assert len(revoked) >= 1
    assert not rig.rows("end")  # each run was terminated by the next one
