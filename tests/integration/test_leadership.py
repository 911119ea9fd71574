"""The scheduler's side of SPEC §7, in-process and deterministic where timing matters: who leads,
what a standby logs, losing the lease or being fenced out (logged once, never an exit), stopping
before the lease could lapse (monotonic clock), and outages that back off instead of raising.

The real-process versions (three beats, SIGTERM, kill -9, SIGSTOP, restarts) are in
``tests/reliability``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import ExitStack, closing
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from kombu.exceptions import OperationalError

from celery_durable_beat import faults
from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.exceptions import StoreUnavailable
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.leadership import Leadership
from celery_durable_beat.lease.base import LEASE_SAFETY
from celery_durable_beat.model import Outcome, Trigger
from celery_durable_beat.publish.capturing import CapturingPublisher
from celery_durable_beat.scheduler import Scheduler
from celery_durable_beat.schedules.validate import validate_entries
from celery_durable_beat.store.base import Advance, AuditEvent
from celery_durable_beat.store.sql import SqlStore
from celery_durable_beat.sync import sync_definitions
from tests.support.procs import free_port, wait_until

pytestmark = pytest.mark.integration


class StepClock:
    """Real wall time; a monotonic clock the test can push forward."""

    def __init__(self) -> None:
        import time

        self._time = time
        self.offset = 0.0

    def now_ms(self) -> int:
        return self._time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return self._time.monotonic() + self.offset


@pytest.fixture
def make_beat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Schedulers as ``celery beat`` builds them, minus the process-wide signal handlers."""
    monkeypatch.delenv("DURABLE_BEAT_URL", raising=False)
    monkeypatch.setattr(Scheduler, "_install_signal_handlers", lambda self: None)
    with ExitStack() as made:
        yield partial(_scheduler, made, tmp_path)


def _scheduler(
    made: ExitStack,
    tmp_path: Path,
    name: str,
    schedule: dict[str, dict[str, Any]] | None = None,
    *,
    url: str | None = None,
    ttl: float = 30.0,
    poll: float = 1.0,
    clock: StepClock | None = None,
    lease_url: str | None = None,
) -> Scheduler:
    """A scheduler whose lease holder is ``name``, closed when the test ends."""
    app = Celery(f"lead-{name}", broker="memory://", set_as_current=False)
    app.conf.durable_beat_url = url or f"sqlite:///{tmp_path}/store.sqlite3"
    app.conf.beat_schedule = schedule or {}
    app.conf.durable_beat_lease_ttl = ttl
    app.conf.durable_beat_poll_interval = poll
    app.conf.durable_beat_lease_url = lease_url
    beat = made.enter_context(closing(Scheduler(app, clock=clock)))
    if beat.lease is not None:
        beat.lease.holder = name  # type: ignore[attr-defined]
    return beat


def _round(beat: Scheduler) -> float:
    """One round now, whatever the scheduler's own wake-up time says."""
    beat._wake_at = 0.0
    return beat.tick()


def _election(beat: Scheduler) -> Leadership:
    """The beat's election: who it believes leads, the epoch, the last lease answer."""
    assert beat.loop is not None
    return beat.loop.leadership


def _messages(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def _leader_and_standby(
    make_beat: Any, caplog: pytest.LogCaptureFixture, ttl: float
) -> tuple[Scheduler, Scheduler]:
    """beat-a and beat-b with this TTL, beat-a leading after one round; INFO logs captured."""
    caplog.set_level(logging.INFO, logger="celery_durable_beat")
    a, b = make_beat("beat-a", ttl=ttl), make_beat("beat-b", ttl=ttl)
    _round(a)
    return a, b


def test_a_standby_names_the_leader_and_takes_over_on_release(
    make_beat: Any, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = _leader_and_standby(make_beat, caplog, ttl=0.9)
    assert _messages(caplog, "leadership gained (epoch 1) by beat-a")
    caplog.clear()
    delay = _round(b)
    assert _messages(caplog, "standing by: beat-a leads (epoch 1)")
    assert 0 < delay <= 0.9 / 3 + 1e-9, "a standby tries at least three times per TTL"
    a.close()  # SIGTERM's path: release, so the standby need not wait out the TTL
    assert _messages(caplog, "leadership released (epoch 1)")
    _round(b)
    assert _messages(caplog, "leadership gained (epoch 2) by beat-b")


def test_a_standby_tries_right_after_a_silent_leader_s_lease_expires(
    make_beat: Any, caplog: pytest.LogCaptureFixture
) -> None:
    _, b = _leader_and_standby(make_beat, caplog, ttl=3.0)  # then beat-a goes silent
    assert _round(b) == pytest.approx(1.0)  # the poll interval while the lease has long to run
    delay = wait_until(lambda: (d := _round(b)) < 0.5 and d, 5, "the expiry to come near", 0.1)
    status = _election(b).status
    assert status is not None and status.remaining_ms is not None
    assert delay == pytest.approx(status.remaining_ms / 1000 + 0.02)
    wait_until(lambda: (_round(b), _election(b).was_leader)[1], 3, "beat-b to take over", 0.05)


def test_losing_the_lease_is_logged_once_and_the_beat_keeps_standing_by(
    make_beat: Any, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = _leader_and_standby(make_beat, caplog, ttl=0.5)
    _round(b)
    # beat-a stalls (no rounds): its lease expires by the store's clock and beat-b takes over.
    wait_until(lambda: (_round(b), _election(b).was_leader)[1], 5, "beat-b to take over", 0.05)
    caplog.clear()
    for _ in range(5):
        assert _round(a) > 0
    lost = _messages(caplog, "leadership lost")
    assert lost == ["leadership lost (epoch 1): beat-b holds the lease now (epoch 2); standing by"]
    assert _election(a).was_leader is False and not _election(a).still_leader()


def test_a_fenced_leader_writes_nothing_releases_and_comes_back_with_a_newer_epoch(
    make_beat: Any, caplog: pytest.LogCaptureFixture, redis_url: str
) -> None:
    """The Redis lease says "you lead" but the store has seen a newer epoch (Redis lost its data
    and the floor was stale, or a partition): the store's fence is the last word."""
    caplog.set_level(logging.INFO, logger="celery_durable_beat")
    a = make_beat("beat-a", {"s": {"task": "t", "schedule": "@every:200"}}, lease_url=redis_url)
    store = a.store
    assert store is not None
    wait_until(lambda: (_round(a), store.history("s", 5))[1], 5, "a first tick", interval=0.05)
    first = _election(a).epoch
    store.register_epoch(first + 5)  # a newer leader registered its epoch (a stall, a partition)
    caplog.clear()
    seen = {e.id for e in store.history("s", 100)}
    fenced = _election(a)
    wait_until(lambda: (_round(a), fenced.was_leader is False)[1], 5, "the fence to bite", 0.05)
    assert len(_messages(caplog, "leadership lost")) == 1
    assert "fenced" in _messages(caplog, "leadership lost")[0]
    assert [e for e in store.history("s", 100) if e.id not in seen] == []  # nothing recorded
    import redis

    client = redis.Redis.from_url(redis_url)
    assert not client.exists("{durable_beat}:lease")  # released, so a fresh epoch can be taken
    client.close()
    wait_until(lambda: (_round(a), _election(a).was_leader)[1], 5, "leadership regained", 0.05)
    assert _election(a).epoch > first + 5
    wait_until(
        lambda: (_round(a), [e for e in store.history("s", 100) if e.id not in seen])[1],
        5,
        "ticks under the new epoch",
        0.05,
    )
    fresh = [e for e in store.history("s", 100) if e.id not in seen]
    assert {e.epoch for e in fresh} == {_election(a).epoch}
    enqueued = [e.tick_ms for e in store.history("s", 100) if e.outcome is Outcome.ENQUEUED]
    assert len(enqueued) == len(set(enqueued))


def test_a_renewal_too_slow_to_trust_dispatches_nothing(make_beat: Any) -> None:
    clock = StepClock()
    a = make_beat("beat-a", {"s": {"task": "t", "schedule": "@every:100"}}, ttl=2.0, clock=clock)
    assert a.lease is not None and a.store is not None
    real = a.lease.acquire_or_renew

    def slow_renewal() -> Any:
        status = real()
        clock.offset += 2.0 * LEASE_SAFETY + 0.01  # the answer came back too late to rely on
        return status

    a.lease.acquire_or_renew = slow_renewal  # type: ignore[method-assign]
    for _ in range(5):
        _round(a)
    assert a.store.history("s", 10) == []


def test_the_round_stops_between_schedules_once_the_lease_may_lapse(sqlite_url: str) -> None:
    store = SqlStore(sqlite_url)
    store.ensure_schema()
    store.register_epoch(1)
    entries = {n: {"task": "t", "schedule": "@every 10s"} for n in ("a", "b", "c")}
    t0 = 1_780_000_000_000
    sync_definitions(store, validate_entries(entries), t0)
    answers = iter([True, False, False])
    publisher = CapturingPublisher()
    Dispatcher(store, publisher, still_leader=lambda: next(answers)).run_round(t0 + 10_000, 1)
    assert len(publisher.messages) == 1
    assert store.due_backlog(t0 + 10_000) == 2  # the others stay due for the next leader
    store.close()


def test_a_leader_frozen_inside_its_write_does_not_lock_out_the_next_leader(pg_url: str) -> None:
    """A leader frozen inside its audit-and-advance transaction holds its uncommitted records
    (their unique task ids) against the next leader writing the same tick; PostgreSQL ends its
    session once it has been idle for the TTL. (The claim itself holds nothing: store rule 2.)"""
    frozen, successor = SqlStore(pg_url, stall_timeout_s=0.5), SqlStore(pg_url)
    frozen.ensure_schema()
    t0 = 1_780_000_000_000
    sync_definitions(frozen, validate_entries({"s": {"task": "t", "schedule": "@every 10s"}}), t0)
    with frozen.claim_due(t0 + 10_000, 10) as claim:
        [due] = claim.schedules
    tick = due.next_tick_ms
    event = AuditEvent("s", tick, tick_task_id("s", tick), Trigger.AUTO, Outcome.ENQUEUED)
    advance = Advance(due.id, tick, tick + 10_000, tick + 10_000, tick, Outcome.ENQUEUED, 0)
    hits: list[int] = []

    def successor_writes() -> None:
        hits.append(1)
        if len(hits) == 2:  # the frozen leader's records are written, not committed
            assert successor.settle([event], [advance], epoch=0) == [True]

    with faults.paused_at("fenced_write", successor_writes), pytest.raises(StoreUnavailable):
        frozen.settle([event], [advance], epoch=0)  # and its transaction is gone
    record = successor.get("s")
    assert record is not None and record.next_tick_ms == tick + 10_000
    assert len(successor.history("s", 10)) == 1
    frozen.close()
    successor.close()


def test_store_and_broker_failures_back_off_and_never_raise(
    make_beat: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = make_beat("beat-a", {"s": {"task": "t", "schedule": "@every:100"}})
    assert a.store is not None and a.dispatcher is not None
    _round(a)

    def store_down(*_: Any) -> int:
        raise StoreUnavailable("the durable beat store at sqlite:///x failed: gone")

    monkeypatch.setattr(a.store, "clock_and_earliest_due", store_down)
    delays = [_round(a) for _ in range(3)]
    assert delays == sorted(delays) and delays[0] > 0  # growing backoff, no exception
    monkeypatch.undo()
    monkeypatch.setattr(Scheduler, "_install_signal_handlers", lambda self: None)

    def broker_down() -> Any:
        raise OperationalError("Error 111 connecting to 127.0.0.1:1. Connection refused.")

    monkeypatch.setattr(a.dispatcher.publisher, "session", broker_down)
    wait_until(
        lambda: _messages(caplog, "broker unavailable") or (_round(a), False)[1],
        5,
        "a broker failure to be logged",
        0.05,
    )
    assert _round(a) > 0


def test_a_store_down_at_start_is_retried_by_the_rounds(
    make_beat: Any, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"postgresql://postgres:secret@127.0.0.1:{free_port()}/nowhere"
    a = make_beat("beat-a", url=url)  # does not raise: the rounds keep trying
    assert _round(a) > 0 and _round(a) > 0
    assert _messages(caplog, "store unavailable at start")
    assert not any("secret" in r.getMessage() for r in caplog.records)
