"""The runs port against every backend, and the overlap gate.

The claims rules of ``runs/base.py`` (1-6) are tested once, on every backend: ``SqlRunStore`` on
SQLite and PostgreSQL, ``RedisClaims`` and ``MemoryRuns``. The tracking rules (7) run on the
store and on ``MemoryRuns``; the overlap gate (``gates/overlap.py``) on the store, and on memory for
claims kept apart from tracking. Rule 9 (namespaces) runs on every backend: claims of several
namespaces through one backend, tracking seen from several namespaces, and the default
namespace's keys and rows exactly as before namespaces."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from celery_durable_beat.dispatch import tick_message
from celery_durable_beat.gates.overlap import OverlapGate
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.model import Definition, Outcome, OverlapPolicy, Reason, Trigger
from celery_durable_beat.runs.base import Claims, RunKey, Runs, RunState, RunWrite, WriteIf
from celery_durable_beat.runs.factory import dedup_redis_url
from celery_durable_beat.runs.memory import MemoryRuns
from celery_durable_beat.runs.redis import RedisClaims
from celery_durable_beat.runs.sql import SqlRunStore
from celery_durable_beat.schedules.spec import IntervalSpec
from celery_durable_beat.settings import Settings
from celery_durable_beat.store.base import AuditEvent, DueSchedule
from celery_durable_beat.store.sql import SqlStore
from tests.support.procs import wait_until

pytestmark = pytest.mark.integration

T0 = 1_780_000_000_000
NAME = "Nightly Report"
MINUTE = 60_000


def key(tick_ms: int = T0, name: str = NAME) -> RunKey:
    return RunKey(tick_task_id(name, tick_ms), name, tick_ms, Trigger.AUTO.value)


@pytest.fixture
def leader_epoch() -> int:
    """The shared ``sql_store`` fixture (tests/conftest.py) registers this epoch."""
    return 1


@pytest.fixture
def runs(sql_store: SqlStore) -> Iterator[SqlRunStore]:
    run_store = SqlRunStore(sql_store.url)
    yield run_store
    run_store.close()


def _sql_runs(url: str) -> SqlRunStore:
    store = SqlStore(url)
    store.ensure_schema()
    store.close()
    return SqlRunStore(url)


@pytest.fixture(params=["sql-sqlite", "sql-postgresql", "redis", "memory"])
def claims(request: pytest.FixtureRequest) -> Iterator[Claims]:
    """Every claims backend, empty."""
    backend: Claims
    if request.param == "redis":
        backend = RedisClaims(str(request.getfixturevalue("redis_url")))
    elif request.param == "memory":
        backend = MemoryRuns()
    else:
        fixture = "sqlite_url" if request.param == "sql-sqlite" else "pg_url"
        backend = _sql_runs(str(request.getfixturevalue(fixture)))
    yield backend
    backend.close()


def race(claim: Callable[[int], RunState | None], contenders: int = 8) -> list[RunState | None]:
    """Start ``contenders`` claims of one tick at the same instant."""
    barrier = threading.Barrier(contenders)
    results: list[RunState | None] = [RunState.UNKNOWN] * contenders

    def run(i: int) -> None:
        barrier.wait()
        results[i] = claim(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(contenders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return results


def settle(
    claims: Claims,
    k: RunKey,
    state: RunState,
    owner: str,
    keep_ms: int = MINUTE,
    write_if: WriteIf = WriteIf.OWNER,
    attempt: int = 0,
) -> bool:
    return claims.settle(RunWrite(k, state, owner, keep_ms, write_if, attempt))


# -- Claims: rule 1, claim ------------------------------------------------------------------------


def test_of_concurrent_claims_of_one_tick_exactly_one_wins(claims: Claims) -> None:
    results = race(lambda i: claims.claim(key(), f"w{i}", 0, MINUTE))
    assert results.count(None) == 1
    assert all(r is RunState.STARTED for r in results if r is not None)


def test_a_claim_is_refused_while_running_and_once_finished(claims: Claims) -> None:
    assert claims.claim(key(), "w1", 0, MINUTE) is None
    assert claims.claim(key(), "w2", 0, MINUTE) is RunState.STARTED
    assert settle(claims, key(), RunState.SUCCEEDED, "w1")
    assert claims.claim(key(), "w2", 0, MINUTE) is RunState.SUCCEEDED
    assert claims.claim(key(), "w2", 3, MINUTE) is RunState.SUCCEEDED  # even a "retry"


def test_a_claim_repeated_by_its_owner_holds_it(claims: Claims) -> None:
    """A call repeated after its reply was lost must not refuse its own run: the tick would then
    be acknowledged and never run."""
    assert claims.claim(key(), "w1", 0, MINUTE) is None
    assert claims.claim(key(), "w1", 0, MINUTE) is None
    assert claims.claim(key(), "w2", 0, MINUTE) is RunState.STARTED
    assert settle(claims, key(), RunState.SUCCEEDED, "w1")
    assert claims.claim(key(), "w1", 0, MINUTE) is RunState.SUCCEEDED


def test_settles_given_to_a_claim_are_applied_first(claims: Claims) -> None:
    ended, other = key(T0), key(T0 + MINUTE)
    assert claims.claim(ended, "w1", 0, MINUTE) is None
    end = RunWrite(ended, RunState.SUCCEEDED, "w1", MINUTE, WriteIf.OWNER)
    assert claims.claim(other, "w1", 0, MINUTE, [end]) is None
    assert claims.state(ended.task_id) is RunState.SUCCEEDED
    # A duplicate of the ended tick carrying its own end meets it finished, not running.
    again = RunWrite(other, RunState.FAILED, "w1", MINUTE, WriteIf.OWNER)
    assert claims.claim(ended, "w2", 0, MINUTE, [again]) is RunState.SUCCEEDED
    assert claims.state(other.task_id) is RunState.FAILED
    claims.settle_many(
        [RunWrite(k, RunState.REVOKED, "x", MINUTE, WriteIf.ALWAYS) for k in (ended, other)]
    )
    assert claims.state(ended.task_id) is claims.state(other.task_id) is RunState.REVOKED


def test_an_expired_claim_is_taken_over(claims: Claims) -> None:
    assert claims.claim(key(), "dead-worker", 0, 1) is None
    wait_until(lambda: claims.state(key().task_id) is None, 10, "the 1 ms claim to expire")
    assert claims.claim(key(), "w2", 0, MINUTE) is None
    assert claims.state(key().task_id) is RunState.STARTED
    assert not settle(claims, key(), RunState.SUCCEEDED, "dead-worker")  # not its claim now


def test_ever_claimed_remembers_a_claim_that_lapsed(claims: Claims) -> None:
    lapsed, never, ended = key(T0), key(T0 + MINUTE), key(T0 + 2 * MINUTE)
    assert claims.ever_claimed([]) == set()
    assert claims.claim(lapsed, "dead-worker", 0, 1) is None  # its worker died: no end written
    assert claims.claim(ended, "w1", 0, MINUTE) is None
    assert settle(claims, ended, RunState.SUCCEEDED, "w1")
    wait_until(lambda: claims.state(lapsed.task_id) is None, 10, "the 1 ms claim to expire")
    ids = [lapsed.task_id, never.task_id, ended.task_id]
    assert claims.ever_claimed(ids) == {lapsed.task_id, ended.task_id}


def test_ever_claimed_sees_a_live_claim_without_its_marker(redis_url: str) -> None:
    claims = RedisClaims(redis_url)
    assert claims.claim(key(), "w1", 0, MINUTE) is None
    claims.client.delete(claims.marker(key().task_id))  # made by a worker of an earlier version
    assert claims.ever_claimed([key().task_id]) == {key().task_id}
    claims.close()


def test_a_retried_tick_is_claimed_by_its_retry_only(claims: Claims) -> None:
    k = key()
    assert claims.claim(k, "w1", 0, MINUTE) is None
    assert settle(claims, k, RunState.RETRIED, "w1", attempt=1)
    assert claims.claim(k, "dup", 0, MINUTE) is RunState.RETRIED  # the original, again
    assert claims.claim(k, "w2", 1, MINUTE) is None  # the retry
    assert claims.claim(k, "dup", 1, MINUTE) is RunState.STARTED  # the retry, again
    assert settle(claims, k, RunState.SUCCEEDED, "w2", attempt=1)
    assert claims.claim(k, "dup", 2, MINUTE) is RunState.SUCCEEDED


# -- Claims: rules 2-6 ----------------------------------------------------------------------------


def random_writes(
    rng: random.Random,
    count: int,
    ticks: list[RunKey],
    states: list[RunState],
    owners: list[str],
    keeps: list[int],
) -> list[RunWrite]:
    """``count`` writes drawn from these, of every kind, mostly the background flusher's two."""
    kinds = [WriteIf.ALWAYS, WriteIf.OWNER] * 3 + [
        WriteIf.UNFINISHED,
        WriteIf.UNLESS_ENDED_OTHERWISE,
        WriteIf.NOT_STARTED,
    ]
    return [
        RunWrite(
            rng.choice(ticks),
            rng.choice(states),
            rng.choice(owners),
            rng.choice(keeps),
            rng.choice(kinds),
        )
        for _ in range(count)
    ]


@pytest.mark.parametrize("seed", range(6))
def test_many_writes_in_one_call_apply_as_in_turn(claims: Claims, seed: int) -> None:
    """``settle_many`` (the background flusher's batches) applies its writes as one at a time
    would: the store groups them by kind into statements of many rows, each tick's writes in
    order. The in-memory claims, which apply each in turn, are the reference."""
    rng = random.Random(seed)
    ticks = [key(T0 + i * MINUTE, name=f"batch-{seed}") for i in range(4)]
    states = [RunState.STARTED, RunState.SUCCEEDED, RunState.FAILED, RunState.RETRIED]
    writes = random_writes(rng, 40, ticks, states, ["w1", "w2", "w3"], [MINUTE])
    reference = MemoryRuns()
    reference.settle_many(writes)
    claims.settle_many(writes)
    assert [claims.state(k.task_id) for k in ticks] == [reference.state(k.task_id) for k in ticks]


@pytest.mark.parametrize("seed", range(6))
def test_many_writes_in_one_call_leave_the_rows_one_at_a_time_would(
    runs: SqlRunStore, seed: int
) -> None:
    """Every column of the rows the statements of many rows write (SQLite and PostgreSQL), as
    the in-memory store writes them one at a time; some writes expire their row at once, so the
    rules that compare expiry run too."""
    rng = random.Random(seed)
    ticks = [key(T0 + i * MINUTE, name=f"rows-{seed}") for i in range(5)]
    states = [RunState.STARTED, RunState.SUCCEEDED, RunState.FAILED]
    writes = random_writes(rng, 60, ticks, states, ["w1", "w2"], [MINUTE, MINUTE, 2 * MINUTE, -1])
    reference = MemoryRuns()
    reference.write(writes)
    runs.write(writes)
    for k in ticks:
        want, got = reference.get_run(k.task_id), runs.get_run(k.task_id)
        if want is None or got is None:
            assert want is got is None
            continue
        assert (got.schedule_key, got.tick_ms, got.trigger) == (
            want.schedule_key,
            want.tick_ms,
            want.trigger,
        )
        assert (got.state, got.owner) == (want.state, want.owner)
        assert got.expires_at_ms is not None and want.expires_at_ms is not None
        # The store reads its clock twice a row (updated, then expires): 1 ms apart at most.
        kept = got.expires_at_ms - got.updated_at_ms
        assert 0 <= kept - (want.expires_at_ms - want.updated_at_ms) <= 1


def test_owner_writes_leave_other_owners_claims_alone(claims: Claims) -> None:
    claims.claim(key(), "w1", 0, MINUTE)
    assert not settle(claims, key(), RunState.SUCCEEDED, "w2")
    assert claims.state(key().task_id) is RunState.STARTED
    assert settle(claims, key(), RunState.REVOKED, "w2", write_if=WriteIf.ALWAYS)
    assert claims.state(key().task_id) is RunState.REVOKED
    # An owner write of a tick with no claim records it (its start could not be recorded).
    assert settle(claims, key(T0 + 1000), RunState.SUCCEEDED, "w3")
    assert claims.state(key(T0 + 1000).task_id) is RunState.SUCCEEDED


def test_an_unfinished_write_leaves_the_claim_its_owner(claims: Claims) -> None:
    """A state learnt elsewhere (a lost pool process: ``failed``) keeps the run's owner, so the
    run's own later write still applies, on every backend."""
    assert claims.claim(key(), "w1", 0, MINUTE) is None
    assert settle(claims, key(), RunState.FAILED, "worker", write_if=WriteIf.UNFINISHED)
    assert settle(claims, key(), RunState.SUCCEEDED, "w1")
    assert claims.state(key().task_id) is RunState.SUCCEEDED


def test_unfinished_writes_touch_only_unfinished_claims(claims: Claims) -> None:
    claims.claim(key(), "w1", 0, MINUTE)
    settle(claims, key(T0 + 1000), RunState.SUCCEEDED, "w1")
    results = [
        settle(claims, k, RunState.FAILED, "worker", write_if=WriteIf.UNFINISHED)
        for k in (key(), key(), key(T0 + 1000), key(T0 + 2000))
    ]
    assert results == [True, False, False, False]
    assert claims.state(key().task_id) is RunState.FAILED
    assert claims.state(key(T0 + 1000).task_id) is RunState.SUCCEEDED
    assert claims.state(key(T0 + 2000).task_id) is None


def test_unless_ended_otherwise_writes_skip_only_other_ends(claims: Claims) -> None:
    # A hard time limit recorded by the main process: before or after the run's claim, before or
    # after the killed run's own ``failed``; never over another end.
    running, done, failed, gone, lapsed = (key(T0 + i * 1000) for i in range(5))
    claims.claim(running, "w1", 0, MINUTE)
    settle(claims, done, RunState.SUCCEEDED, "w1")
    settle(claims, failed, RunState.FAILED, "w1")
    settle(claims, lapsed, RunState.SUCCEEDED, "w1", keep_ms=1)
    wait_until(lambda: claims.state(lapsed.task_id) is None, 10, "the 1 ms row to expire")
    mode = WriteIf.UNLESS_ENDED_OTHERWISE
    results = [
        settle(claims, k, RunState.FAILED, "worker:limit", write_if=mode)
        for k in (running, done, failed, gone, lapsed)
    ]
    assert results == [True, False, True, True, True]
    assert [claims.state(k.task_id) for k in (running, done, failed, gone, lapsed)] == [
        RunState.FAILED,
        RunState.SUCCEEDED,
        RunState.FAILED,
        RunState.FAILED,
        RunState.FAILED,
    ]
    # The killed run's own write comes too late: not its claim any more.
    assert not settle(claims, running, RunState.FAILED, "w1")
    # The claim it recorded refuses the run that comes too late.
    assert claims.claim(gone, "w2", 0, MINUTE) is RunState.FAILED


def test_heartbeat_pushes_on_only_the_owners_started_claim(claims: Claims) -> None:
    alive, done, other = key(T0), key(T0 + 1000), key(T0 + 2000)
    # 2 s, not less: the heartbeat must land before the claims expire even on a loaded machine.
    for k in (alive, done, other):
        claims.claim(k, "w1", 0, 2000)
    settle(claims, done, RunState.SUCCEEDED, "w1", keep_ms=2000)
    claims.heartbeat([(alive.task_id, "w1"), (done.task_id, "w1")], MINUTE)
    claims.heartbeat([(other.task_id, "someone-else")], MINUTE)
    # Past every 2 s expiry (``other`` was claimed last): only what the heartbeat pushed on is left.
    gone = (done.task_id, other.task_id)
    wait_until(lambda: all(claims.state(t) is None for t in gone), 10, "the 2 s expiries")
    assert claims.claim(alive, "w2", 0, MINUTE) is RunState.STARTED  # still alive
    assert claims.claim(done, "w2", 0, MINUTE) is None  # finished, kept 2 s
    assert claims.claim(other, "w2", 0, MINUTE) is None  # lost: nobody pushed it on


def test_not_started_writes_apply_only_where_no_run_started(claims: Claims) -> None:
    absent, running, ended, retrying, lapsed = (key(T0 + n * MINUTE) for n in range(5))
    claims.claim(running, "w1", 0, MINUTE)
    claims.claim(ended, "w1", 0, MINUTE)
    settle(claims, ended, RunState.SUCCEEDED, "w1")
    claims.claim(retrying, "w1", 0, MINUTE)
    settle(claims, retrying, RunState.RETRIED, "w1", attempt=1)
    claims.claim(lapsed, "dead-worker", 0, 1)
    wait_until(lambda: claims.state(lapsed.task_id) is None, 10, "the 1 ms claim to expire")

    def discard(k: RunKey) -> bool:  # a delivery the main process dropped as expired
        return settle(claims, k, RunState.EXPIRED, "worker", write_if=WriteIf.NOT_STARTED)

    assert discard(absent) and claims.state(absent.task_id) is RunState.EXPIRED
    assert not discard(running) and claims.state(running.task_id) is RunState.STARTED
    assert not discard(ended) and claims.state(ended.task_id) is RunState.SUCCEEDED
    assert discard(retrying) and claims.state(retrying.task_id) is RunState.EXPIRED
    assert discard(lapsed) and claims.state(lapsed.task_id) is RunState.EXPIRED
    assert settle(claims, running, RunState.SUCCEEDED, "w1")  # the run's own end still applies


def test_mark_revoked_only_before_the_run_starts(claims: Claims) -> None:
    assert claims.mark_revoked(key(), "beat", MINUTE)  # queued: revoked, refused later
    assert claims.claim(key(), "w1", 0, MINUTE) is RunState.REVOKED
    claims.claim(key(T0 + 1000), "w1", 0, MINUTE)
    assert not claims.mark_revoked(key(T0 + 1000), "beat", MINUTE)  # running: terminate's job
    settle(claims, key(T0 + 1000), RunState.RETRIED, "w1", attempt=1)
    assert claims.mark_revoked(key(T0 + 1000), "beat", MINUTE)  # waiting for a retry
    assert claims.claim(key(T0 + 1000), "w1", 1, MINUTE) is RunState.REVOKED
    claims.claim(key(T0 + 2000), "gone", 0, 1)
    wait_until(lambda: claims.state(key(T0 + 2000).task_id) is None, 10, "the claim to expire")
    assert claims.mark_revoked(key(T0 + 2000), "beat", MINUTE)  # lost: as good as not started


def test_release_gives_the_tick_back_to_the_next_claim(claims: Claims) -> None:
    k = key()
    claims.claim(k, "w1", 0, MINUTE)
    claims.release(k.task_id, "someone-else")
    assert claims.claim(k, "w2", 0, MINUTE) is RunState.STARTED
    claims.release(k.task_id, "w1")
    assert claims.state(k.task_id) is None
    assert claims.claim(k, "w2", 0, MINUTE) is None


# -- RunTracking: rule 7 ----------------------------------------------------------------------


def test_run_state_shows_in_history_and_previous_tick(
    sql_store: SqlStore, runs: SqlRunStore
) -> None:
    _enqueued(sql_store, T0, T0 + MINUTE)
    runs.claim(key(T0), "w1", 0, MINUTE)
    runs.write([RunWrite(key(T0), RunState.FAILED, "w1", MINUTE)])
    events = {e.tick_ms: e.run_state for e in sql_store.history(NAME, 10)}
    assert events == {T0: "failed", T0 + MINUTE: None}
    _previous_ticks_follow_the_enqueued_records(runs)


def test_memory_previous_tick_follows_its_enqueued_records() -> None:
    runs = MemoryRuns()
    for tick in (T0, T0 + MINUTE):
        runs.enqueued(NAME, tick, key(tick).task_id)
    runs.claim(key(T0), "w1", 0, MINUTE)
    runs.write([RunWrite(key(T0), RunState.FAILED, "w1", MINUTE)])
    _previous_ticks_follow_the_enqueued_records(runs)


def _previous_ticks_follow_the_enqueued_records(runs: SqlRunStore | MemoryRuns) -> None:
    prev = runs.previous_tick(NAME, T0 + 2 * MINUTE)
    assert prev is not None and prev.tick_ms == T0 + MINUTE and prev.state is None
    prev = runs.previous_tick(NAME.upper(), T0 + MINUTE)
    assert prev is not None and prev.tick_ms == T0 and prev.state is RunState.FAILED
    assert runs.previous_tick(NAME, T0) is None


@pytest.mark.parametrize("kind", ["sql", "memory"])
def test_states_reads_many_ticks_expired_or_not(kind: str, sql_store: SqlStore) -> None:
    runs: SqlRunStore | MemoryRuns = _sql_runs(sql_store.url) if kind == "sql" else MemoryRuns()
    try:
        runs.write([RunWrite(key(T0), RunState.UNKNOWN_TASK, "worker:unknown_task", -1)])
        runs.write([RunWrite(key(T0 + 1000), RunState.SUCCEEDED, "w", MINUTE)])
        found = runs.states([key(T0).task_id, key(T0 + 1000).task_id, key(T0 + 2000).task_id])
        assert found == {
            key(T0).task_id: RunState.UNKNOWN_TASK,
            key(T0 + 1000).task_id: RunState.SUCCEEDED,
        }
        assert runs.states([]) == {}
        assert runs.claim(key(T0), "w2", 0, MINUTE) is None  # unknown_task never blocks a claim
    finally:
        runs.close()


def test_prune_removes_expired_rows_whose_history_is_gone(
    sql_store: SqlStore, runs: SqlRunStore
) -> None:
    _enqueued(sql_store, T0)
    _prune_keeps_history_and_live_rows(runs)


def test_memory_prune_removes_expired_rows_whose_history_is_gone() -> None:
    runs = MemoryRuns()
    runs.enqueued(NAME, T0, key(T0).task_id)
    _prune_keeps_history_and_live_rows(runs)


def _prune_keeps_history_and_live_rows(runs: SqlRunStore | MemoryRuns) -> None:
    for tick in (T0, T0 + 1000, T0 + 2000):
        runs.write([RunWrite(key(tick), RunState.SUCCEEDED, "w", 1)])
    runs.write([RunWrite(key(T0 + 3000), RunState.SUCCEEDED, "w", MINUTE)])
    short = [key(tick).task_id for tick in (T0, T0 + 1000, T0 + 2000)]
    wait_until(lambda: all(runs.state(t) is None for t in short), 10, "the 1 ms rows to expire")
    assert runs.prune_runs(1) == 1
    assert runs.prune_runs(100) == 1
    assert runs.get_run(key(T0).task_id) is not None  # history still shows it
    assert runs.get_run(key(T0 + 3000).task_id) is not None  # not expired


def _queued_past(runs: SqlRunStore, tick_ms: int, ttl_ms: int) -> bool:
    """Whether the store's clock is more than ``ttl_ms`` past the enqueueing of ``tick_ms``."""
    prev = runs.previous_tick(NAME, tick_ms + 1)
    return (
        prev is not None and prev.tick_ms == tick_ms and prev.now_ms > prev.enqueued_at_ms + ttl_ms
    )


def _state(runs: SqlRunStore | MemoryRuns, k: RunKey) -> RunState | None:
    record = runs.get_run(k.task_id)
    return None if record is None else record.state


def _enqueued(store: SqlStore, *ticks: int, name: str = NAME) -> None:
    store.settle(
        [
            AuditEvent(
                schedule=name,
                tick_ms=t,
                task_id=tick_task_id(name, t),
                trigger=Trigger.AUTO,
                outcome=Outcome.ENQUEUED,
            )
            for t in ticks
        ],
        (),
        1,
    )


def test_redis_url_prefers_the_lease_url_then_a_redis_broker() -> None:
    class App:
        def __init__(self, broker: str | None) -> None:
            self.conf = {"broker_url": broker}

    plain = Settings()
    leased = Settings(lease_url="redis://lease:6379/1")
    assert dedup_redis_url(App("redis://b:6379/0;redis://c:6379/0"), plain) == "redis://b:6379/0"
    assert dedup_redis_url(App("redis://b:6379/0"), leased) == "redis://lease:6379/1"
    assert dedup_redis_url(App("amqp://guest@rabbit//"), plain) is None
    assert dedup_redis_url(App("amqp://guest@rabbit//"), leased) == "redis://lease:6379/1"
    assert dedup_redis_url(App(None), plain) is None


# -- OverlapGate ------------------------------------------------------------------------------


class Control:
    def __init__(self) -> None:
        self.revoked: list[tuple[str, bool]] = []

    def revoke(self, task_id: str, terminate: bool = False) -> None:
        self.revoked.append((task_id, terminate))


class FakeApp:
    def __init__(self) -> None:
        self.control = Control()


class Untouchable:
    """A RunStore that fails the test if the gate asks it anything."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the gate called RunStore.{name} for an allow schedule")


def due(policy: OverlapPolicy, next_tick_ms: int = T0, name: str = NAME) -> DueSchedule:
    definition = Definition(name=name, task="t.work", spec=IntervalSpec(MINUTE), overlap=policy)
    return DueSchedule(
        id=1,
        name=name,
        definition=definition,
        version=1,
        next_tick_ms=next_tick_ms,
        last_tick_ms=None,
        failures=0,
    )


def gate_for(runs: Any, app: Any = None, claims: Any = None, **settings: Any) -> OverlapGate:
    """A gate on one backend, or on ``claims`` kept apart from ``runs`` (as Redis is)."""
    return OverlapGate(app or FakeApp(), Settings(**settings), Runs(claims or runs, runs))


def test_allow_costs_no_query() -> None:
    gate = gate_for(Untouchable())
    d = due(OverlapPolicy.ALLOW)
    assert gate(d, tick_message(d, T0)) is None


def test_skip_waits_for_an_unfinished_previous_tick(sql_store: SqlStore, runs: SqlRunStore) -> None:
    gate = gate_for(runs)
    _enqueued(sql_store, T0)
    d = due(OverlapPolicy.SKIP, T0 + MINUTE)
    assert gate(d, tick_message(d, T0 + MINUTE)) is Reason.OVERLAP  # queued
    runs.claim(key(T0), "w1", 0, MINUTE)
    d = due(OverlapPolicy.SKIP, T0 + MINUTE)
    assert gate(d, tick_message(d, T0 + MINUTE)) is Reason.OVERLAP  # running
    runs.write([RunWrite(key(T0), RunState.SUCCEEDED, "w1", MINUTE)])
    d = due(OverlapPolicy.SKIP, T0 + MINUTE)
    assert gate(d, tick_message(d, T0 + MINUTE)) is None


def test_skip_waits_for_a_run_that_has_no_enqueued_record(
    sql_store: SqlStore, runs: SqlRunStore
) -> None:
    """A tick that went out without its record (its round failed after the publish) and that a
    worker runs is the previous tick (runs rule 7)."""
    gate = gate_for(runs)
    _enqueued(sql_store, T0)
    runs.write([RunWrite(key(T0), RunState.SUCCEEDED, "w1", MINUTE)])
    runs.claim(key(T0 + MINUTE), "w1", 0, MINUTE)  # no ``enqueued`` record for it
    d = due(OverlapPolicy.SKIP, T0 + 2 * MINUTE)
    assert gate(d, tick_message(d, T0 + 2 * MINUTE)) is Reason.OVERLAP
    previous = runs.previous_tick(NAME, T0 + 2 * MINUTE)
    assert previous is not None and previous.task_id == key(T0 + MINUTE).task_id
    runs.write([RunWrite(key(T0 + MINUTE), RunState.SUCCEEDED, "w1", MINUTE)])
    d = due(OverlapPolicy.SKIP, T0 + 2 * MINUTE)
    assert gate(d, tick_message(d, T0 + 2 * MINUTE)) is None
    assert runs.previous_tick(NAME, T0 + MINUTE) is not None  # T0's record, before it


def test_a_lost_previous_tick_does_not_block(sql_store: SqlStore, runs: SqlRunStore) -> None:
    gate = gate_for(runs, queued_ttl=0.05)
    _enqueued(sql_store, T0, T0 + MINUTE)
    runs.claim(key(T0 + MINUTE), "dead-worker", 0, 1)  # started, then no heartbeat
    wait_until(
        lambda: runs.state(key(T0 + MINUTE).task_id) is None and _queued_past(runs, T0, 50),
        10,
        "the claim to expire and T0 to be queued past queued_ttl",
    )
    d = due(OverlapPolicy.SKIP, T0 + 2 * MINUTE)
    assert gate(d, tick_message(d, T0 + 2 * MINUTE)) is None
    d = due(OverlapPolicy.SKIP, T0 + MINUTE)
    assert gate(d, tick_message(d, T0 + MINUTE)) is None  # T0 queued, beyond queued_ttl


def test_skip_within_one_round_lets_only_the_first_tick_through(runs: SqlRunStore) -> None:
    gate = gate_for(runs)
    d = due(OverlapPolicy.SKIP)
    assert gate(d, tick_message(d, T0)) is None
    assert gate(d, tick_message(d, T0 + MINUTE)) is Reason.OVERLAP
    assert gate(d, tick_message(d, T0 + 2 * MINUTE)) is Reason.OVERLAP
    fresh = due(OverlapPolicy.SKIP)  # the next round: the audit decides again
    assert gate(fresh, tick_message(fresh, T0 + MINUTE)) is None


def test_replace_revokes_the_unfinished_previous_tick(
    sql_store: SqlStore, runs: SqlRunStore
) -> None:
    app = FakeApp()
    gate = gate_for(runs, app)
    _enqueued(sql_store, T0, T0 + MINUTE)
    runs.claim(key(T0 + MINUTE), "w1", 0, MINUTE)
    d = due(OverlapPolicy.REPLACE, T0 + 2 * MINUTE)
    assert gate(d, tick_message(d, T0 + 2 * MINUTE)) is None
    assert app.control.revoked == []  # revokes wait until the new tick is recorded enqueued
    gate.flush({key(T0 + 2 * MINUTE).task_id})
    assert app.control.revoked == [(key(T0 + MINUTE).task_id, True)]
    assert _state(runs, key(T0 + MINUTE)) is RunState.STARTED  # the worker records revoked
    # Within the round, a second tick replaces the first, which has not started: revoked now.
    assert gate(d, tick_message(d, T0 + 3 * MINUTE)) is None
    gate.flush({key(T0 + 3 * MINUTE).task_id})
    assert app.control.revoked[-1] == (key(T0 + 2 * MINUTE).task_id, True)
    assert _state(runs, key(T0 + 2 * MINUTE)) is RunState.REVOKED
    assert runs.claim(key(T0 + 2 * MINUTE), "w2", 0, MINUTE) is RunState.REVOKED


def test_replace_revokes_in_claims_kept_apart_too() -> None:
    app, claims, tracking = FakeApp(), MemoryRuns(), MemoryRuns()
    gate = gate_for(tracking, app, claims=claims)
    d = due(OverlapPolicy.REPLACE)
    assert gate(d, tick_message(d, T0)) is None
    assert gate(d, tick_message(d, T0 + MINUTE)) is None
    gate.flush({key(T0 + MINUTE).task_id})
    assert app.control.revoked == [(key(T0).task_id, True)]
    assert _state(tracking, key(T0)) is RunState.REVOKED
    assert claims.claim(key(T0), "w1", 0, MINUTE) is RunState.REVOKED


def test_replace_revokes_nothing_for_a_tick_that_is_not_safe(
    sql_store: SqlStore, runs: SqlRunStore
) -> None:
    app = FakeApp()
    gate = gate_for(runs, app)
    _enqueued(sql_store, T0)
    runs.claim(key(T0), "w1", 0, MINUTE)
    d = due(OverlapPolicy.REPLACE, T0 + MINUTE)
    assert gate(d, tick_message(d, T0 + MINUTE)) is None
    gate.flush(set())  # its publish failed, or the round did: the displaced run stays
    gate.flush({key(T0 + MINUTE).task_id})  # and a later flush does not resurrect it
    assert app.control.revoked == []
    assert _state(runs, key(T0)) is RunState.STARTED


# -- rule 9: namespaces ---------------------------------------------------------------------------

NAMESPACES = (None, "alpha", "beta")
"""The default namespace and two others, whose ticks share the schedule name and instants."""


def ns_key(namespace: str | None, tick_ms: int = T0, name: str = NAME) -> RunKey:
    return RunKey(tick_task_id(name, tick_ms, namespace), name, tick_ms, Trigger.AUTO.value)


def _in_namespace(claims: Claims, namespace: str | None) -> Claims:
    """Another handle on the same backend, built for ``namespace`` (as another app's beat or
    worker would build it)."""
    if isinstance(claims, MemoryRuns):
        return claims.in_namespace(namespace)
    if isinstance(claims, RedisClaims):
        return RedisClaims(claims.url, namespace=namespace)
    assert isinstance(claims, SqlRunStore)
    return SqlRunStore(claims.url, namespace=namespace)


def test_a_key_is_in_the_namespace_its_id_names() -> None:
    assert ns_key(None).namespace is None
    assert ns_key("alpha").namespace == "alpha"
    assert ns_key("alpha").task_id == "alpha:" + ns_key(None).task_id
    # An id beat did not make in a namespace is the default's, whatever it holds.
    assert RunKey("Not:a-namespace@x", NAME, T0, "auto").namespace is None
    assert RunKey("plain-uuid-like-id", NAME, T0, "auto").namespace is None


def test_two_namespaces_claims_of_one_tick_never_refuse_each_other(claims: Claims) -> None:
    """Three apps' ticks of one schedule name at one instant, claimed through one backend (a
    worker pool serving them all): each once, each duplicate refused by its own tick only."""
    keys = [ns_key(ns) for ns in NAMESPACES]
    assert len({k.task_id for k in keys}) == 3
    assert [claims.claim(k, f"w-{k.namespace}", 0, MINUTE) for k in keys] == [None] * 3
    assert [claims.claim(k, "dup", 0, MINUTE) for k in keys] == [RunState.STARTED] * 3
    assert settle(claims, keys[1], RunState.SUCCEEDED, "w-alpha")
    assert [claims.state(k.task_id) for k in keys] == [
        RunState.STARTED,
        RunState.SUCCEEDED,
        RunState.STARTED,
    ]
    claims.release(keys[2].task_id, "w-beta")  # beta's given back; the others untouched
    assert claims.claim(keys[2], "w2", 0, MINUTE) is None
    assert claims.claim(keys[0], "w2", 0, MINUTE) is RunState.STARTED
    assert claims.claim(keys[1], "w2", 0, MINUTE) is RunState.SUCCEEDED
    later = [ns_key(ns, T0 + MINUTE) for ns in NAMESPACES]
    assert claims.mark_revoked(later[1], "beat", MINUTE)  # alpha's beat revokes alpha's only
    assert [claims.claim(k, "w3", 0, MINUTE) for k in later] == [None, RunState.REVOKED, None]
    assert claims.ever_claimed([k.task_id for k in keys + later]) == {
        k.task_id for k in keys + later
    }


def test_claims_of_a_tick_are_its_namespaces_whoever_built_the_backend(claims: Claims) -> None:
    """The worker's backend is built for its own app's namespace (here the default), alpha's
    beat's for alpha: both find alpha's tick in one place (its id's namespace)."""
    alpha = _in_namespace(claims, "alpha")
    try:
        k = ns_key("alpha")
        assert alpha.mark_revoked(k, "beat", MINUTE)
        assert claims.claim(k, "w1", 0, MINUTE) is RunState.REVOKED
        assert alpha.state(k.task_id) is claims.state(k.task_id) is RunState.REVOKED
        mine = ns_key(None)
        assert alpha.claim(mine, "w1", 0, MINUTE) is None
        assert claims.claim(mine, "w2", 0, MINUTE) is RunState.STARTED
        assert claims.ever_claimed([mine.task_id, k.task_id]) == {mine.task_id, k.task_id}
    finally:
        alpha.close()


def test_the_default_namespaces_redis_keys_are_as_before(redis_url: str) -> None:
    claims, alpha = RedisClaims(redis_url), RedisClaims(redis_url, namespace="alpha")
    try:
        plain, other = ns_key(None), ns_key("alpha")
        for k in (plain, other):
            assert claims.claim(k, "w1", 0, MINUTE) is None
        claims.count("duplicates_refused")
        alpha.count("duplicates_refused")
        alpha.count("duplicates_refused")
        found = {key.decode() for key in claims.client.keys("durable_beat*")}
        assert found == {
            f"durable_beat:run:{plain.task_id}",
            f"durable_beat:claimed:{plain.task_id}",
            "durable_beat:counters",
            f"durable_beat:alpha:run:{other.task_id}",
            f"durable_beat:alpha:claimed:{other.task_id}",
            "durable_beat:alpha:counters",
        }
        assert claims.client.get(f"durable_beat:run:{plain.task_id}") == b"started|0|w1"
        assert claims.counters() == {"duplicates_refused": 1}
        assert alpha.counters() == {"duplicates_refused": 2}
    finally:
        claims.close()
        alpha.close()


@pytest.mark.parametrize("driver", ["sqlite_url", "pg_url"])
def test_the_default_namespaces_rows_are_as_before(
    driver: str, request: pytest.FixtureRequest
) -> None:
    """Every write path (a claim, one write, a batch of writes: on PostgreSQL the direct
    statements, one of many rows) stores each row under its tick's namespace, ``''`` for the
    default; a worker's row under its app's."""
    runs = _sql_runs(str(request.getfixturevalue(driver)))
    alpha = SqlRunStore(runs.url, namespace="alpha")
    try:
        claimed, written = ns_key(None), ns_key("beta", T0 + MINUTE)
        assert runs.claim(claimed, "w1", 0, MINUTE) is None
        runs.write([RunWrite(written, RunState.SUCCEEDED, "w1", MINUTE)])
        batch = [ns_key(ns, T0 + 2 * MINUTE) for ns in NAMESPACES]
        runs.write([RunWrite(k, RunState.STARTED, "w1", MINUTE, WriteIf.ALWAYS) for k in batch])
        runs.write([RunWrite(k, RunState.FAILED, "w1", MINUTE) for k in batch])
        runs.announce_worker("w1@host", ["celery"])
        alpha.announce_worker("w1@host", ["alpha-queue"])
        assert _namespaces(runs.url, "runs") == {
            claimed.task_id: "",
            written.task_id: "beta",
            batch[0].task_id: "",
            batch[1].task_id: "alpha",
            batch[2].task_id: "beta",
        }
        assert _namespaces(runs.url, "workers") == {"w1@host": ["", "alpha"]}
        assert runs.states([k.task_id for k in batch]) == {batch[0].task_id: RunState.FAILED}
    finally:
        runs.close()
        alpha.close()


def _namespaces(url: str, table: str) -> dict[str, Any]:
    """``task_id -> namespace`` of the runs, or ``hostname -> [namespaces]`` of the workers."""
    from sqlalchemy import create_engine, select

    from celery_durable_beat.store.tables import runs, workers

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            if table == "runs":
                return dict(conn.execute(select(runs.c.task_id, runs.c.namespace)).all())
            found: dict[str, list[str]] = {}
            query = select(workers.c.hostname, workers.c.namespace).order_by(workers.c.namespace)
            for hostname, namespace in conn.execute(query):
                found.setdefault(hostname, []).append(namespace)
            return found
    finally:
        engine.dispose()


class Tracked:
    """One tracking backend seen from several namespaces, and the audit its beats would write."""

    def __init__(self, kind: str, request: pytest.FixtureRequest) -> None:
        self.memory = MemoryRuns() if kind == "memory" else None
        self.url = "" if kind == "memory" else str(request.getfixturevalue(f"{kind}_url"))
        if self.url:
            _sql_runs(self.url).close()
        self.made: list[SqlRunStore | MemoryRuns] = []

    def tracking(self, namespace: str | None) -> SqlRunStore | MemoryRuns:
        made = (
            self.memory.in_namespace(namespace)
            if self.memory is not None
            else SqlRunStore(self.url, namespace=namespace)
        )
        self.made.append(made)
        return made

    def enqueued(self, namespace: str | None, *ticks: int) -> None:
        """``enqueued`` records of ``NAME`` in ``namespace``, as its beat's round writes them."""
        if self.memory is not None:
            for tick in ticks:
                view = self.memory.in_namespace(namespace)
                view.enqueued(NAME, tick, tick_task_id(NAME, tick, namespace))
            return
        from sqlalchemy import create_engine

        from celery_durable_beat.ids import name_key
        from celery_durable_beat.store.tables import audit

        engine = create_engine(self.url)
        rows = [
            {
                "namespace": namespace or "",
                "schedule": NAME,
                "schedule_key": name_key(NAME),
                "tick_ms": tick,
                "task_id": tick_task_id(NAME, tick, namespace),
                "trigger": Trigger.AUTO.value,
                "outcome": Outcome.ENQUEUED.value,
                "version": 1,
                "epoch": 1,
                "recorded_at_ms": T0,
                "detail": {},
            }
            for tick in ticks
        ]
        try:
            with engine.begin() as conn:
                conn.execute(audit.insert(), rows)
        finally:
            engine.dispose()

    def close(self) -> None:
        for made in self.made:
            made.close()


@pytest.fixture(params=["memory", "sqlite", "pg"])
def tracked(request: pytest.FixtureRequest) -> Iterator[Tracked]:
    """Every tracking backend, empty, to be seen from several namespaces."""
    found = Tracked(request.param, request)
    yield found
    found.close()


def test_tracking_reads_in_one_namespace_never_see_anothers(tracked: Tracked) -> None:
    """Beta's beat recorded and its workers ran ticks of ``NAME``; alpha's beat, with the same
    schedule name and none of its own yet, reads nothing of them (its overlap, failing streaks,
    unknown tasks, ``require_worker``), and the default namespace neither."""
    alpha, beta, default = (tracked.tracking(ns) for ns in ("alpha", "beta", None))
    tracked.enqueued("beta", T0, T0 + MINUTE)
    beta_ticks = [ns_key("beta", T0), ns_key("beta", T0 + MINUTE), ns_key("beta", T0 + 2 * MINUTE)]
    default.write([RunWrite(k, RunState.FAILED, "w1", MINUTE) for k in beta_ticks])
    beta.announce_worker("w1@host", ["beta-queue"])
    for view in (alpha, default):
        assert view.previous_tick(NAME, T0 + 3 * MINUTE) is None
        assert view.recent_states(NAME, None, 10) == []
        assert view.states([k.task_id for k in beta_ticks]) == {}
        assert view.get_run(beta_ticks[0].task_id) is None
        assert view.live_workers(MINUTE) == []
    # Beta reads them all, written by a worker of the default namespace.
    prev = beta.previous_tick(NAME, T0 + 3 * MINUTE)
    assert prev is not None and prev.task_id == beta_ticks[2].task_id  # run, never recorded
    assert prev.state is RunState.FAILED
    assert beta.recent_states(NAME, None, 10) == [RunState.FAILED] * 3
    assert set(beta.states([k.task_id for k in beta_ticks])) == {k.task_id for k in beta_ticks}
    record = beta.get_run(beta_ticks[0].task_id)
    assert record is not None and record.namespace == "beta"
    assert [w.hostname for w in beta.live_workers(MINUTE)] == ["w1@host"]
    # Alpha's own ticks, same name and instants: it sees only those.
    tracked.enqueued("alpha", T0)
    alpha.write([RunWrite(ns_key("alpha", T0), RunState.SUCCEEDED, "w1", MINUTE)])
    alpha.announce_worker("w1@host", ["alpha-queue"])
    prev = alpha.previous_tick(NAME, T0 + 3 * MINUTE)
    assert prev is not None and prev.task_id == ns_key("alpha", T0).task_id
    assert prev.state is RunState.SUCCEEDED
    assert alpha.recent_states(NAME, None, 10) == [RunState.SUCCEEDED]
    assert [w.queues for w in alpha.live_workers(MINUTE)] == [("alpha-queue",)]
    alpha.forget_worker("w1@host")  # alpha's worker row only
    assert alpha.live_workers(MINUTE) == []
    assert [w.queues for w in beta.live_workers(MINUTE)] == [("beta-queue",)]
    assert beta.recent_states(NAME, None, 10) == [RunState.FAILED] * 3


def test_workers_prune_expired_rows_of_every_namespace(tracked: Tracked) -> None:
    """Only workers prune, and a pool may serve namespaces its own app is not in: a row whose
    history is gone is pruned whichever namespace it is in; one history still shows is kept."""
    worker = tracked.tracking(None)
    tracked.enqueued("alpha", T0)
    keys = [ns_key(ns, T0) for ns in NAMESPACES]
    worker.write([RunWrite(k, RunState.SUCCEEDED, "w", 1) for k in keys])
    wait_until(lambda: all(worker.state(k.task_id) is None for k in keys), 10, "rows to expire")
    assert worker.prune_runs(100) == 2
    assert tracked.tracking("alpha").get_run(keys[1].task_id) is not None  # history shows it
    assert tracked.tracking("beta").get_run(keys[2].task_id) is None


def test_the_runs_a_process_uses_are_built_for_its_apps_namespace(
    sqlite_url: str, redis_url: str
) -> None:
    """Beat's gates read, and a worker announces itself and counts, in its app's namespace;
    the default namespace's when it sets none."""
    from celery_durable_beat.runs.factory import make_runs, make_tracking

    class App:
        def __init__(self) -> None:
            self.conf = {"broker_url": redis_url}

    assert make_tracking(sqlite_url).namespace is None
    for namespace in (None, "alpha"):
        made = make_runs(App(), Settings(namespace=namespace), sqlite_url)
        try:
            assert isinstance(made.tracking, SqlRunStore) and isinstance(made.claims, RedisClaims)
            assert made.tracking.namespace == made.claims.namespace == namespace
        finally:
            made.close()
