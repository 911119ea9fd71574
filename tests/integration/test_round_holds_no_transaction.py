"""No transaction is held open while publishing (SPEC §3, issue #10 item 4), on the SQLite default.

A burst of 5,000 due ticks is published through the real publisher to Redis. Midway through it
(at the 2,500th publish), as an operator and a worker would, ``DurableBeat.pause`` runs against
the same SQLite file and a worker claims a tick through the store-backed claims. Both must
return promptly — well under SQLite's 10 s busy timeout, which a round holding ``BEGIN
IMMEDIATE`` across its publishes would make them wait out and then fail with
``StoreUnavailable``. The pause must also survive the round: the round's advance of that
schedule is refused (compare-and-set on an active row), not written over it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from celery import Celery

from celery_durable_beat import DurableBeat
from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.exceptions import StoreUnavailable
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.message import TickMessage
from celery_durable_beat.model import Definition, Reason, ScheduleState, Source
from celery_durable_beat.publish.base import Publisher, PublishSession
from celery_durable_beat.publish.celery_publisher import CeleryPublisher
from celery_durable_beat.runs.base import RunKey
from celery_durable_beat.runs.sql import SqlRunStore
from celery_durable_beat.schedules.spec import IntervalSpec
from celery_durable_beat.store.sql import SqlStore
from celery_durable_beat.store.sql import admin as sql_admin

pytestmark = pytest.mark.integration

BURST = 5_000
PROBE_AT = 2_500
PROMPT_S = 2.0
"""Well under the 10 s busy timeout: what "returns promptly" means here."""
EPOCH = 1


class _ProbingSession:
    """The real session; the probe runs at the ``at``-th publish, in the middle of the burst."""

    def __init__(self, inner: PublishSession, at: int, probe: Callable[[], None]) -> None:
        self.inner, self.at, self.probe, self.count = inner, at, probe, 0

    def publish(self, message: TickMessage) -> Reason | None:
        self.count += 1
        if self.count == self.at:
            self.probe()
        return self.inner.publish(message)

    def unconfirmed(self) -> int:
        return self.inner.unconfirmed()

    def confirm(self) -> Reason | None:
        return self.inner.confirm()


class _ProbingPublisher:
    def __init__(self, inner: Publisher, at: int, probe: Callable[[], None]) -> None:
        self.inner, self.at, self.probe = inner, at, probe

    @contextmanager
    def session(self) -> Iterator[_ProbingSession]:
        with self.inner.session() as session:
            yield _ProbingSession(session, self.at, self.probe)


def _add_due_schedules(store: SqlStore, count: int, first_tick_ms: int) -> None:
    """``count`` schedules due at ``first_tick_ms``, written in one transaction (fast setup)."""
    defs = [
        Definition(name=f"job-{i:05d}", task="tasks.work", spec=IntervalSpec(60_000))
        for i in range(count)
    ]

    def write(conn: Any) -> None:
        for definition in defs:
            sql_admin.upsert(conn, "", definition, Source.CONFIG, first_tick_ms, 0)

    store.write_transaction(write)


@pytest.mark.timeout(180)
def test_pause_and_worker_claims_during_a_burst_return_promptly(
    sqlite_url: str, redis_url: str
) -> None:
    store = SqlStore(sqlite_url)
    store.ensure_schema()
    store.register_epoch(EPOCH)
    now = store.now_ms()
    tick = now - now % 60_000
    _add_due_schedules(store, BURST, tick)

    beat_app = Celery("beat", broker=redis_url, set_as_current=False)
    operator_app = Celery("operator", broker=redis_url, set_as_current=False)
    operator_app.conf.durable_beat_url = sqlite_url
    control = DurableBeat(operator_app)
    claims = SqlRunStore(sqlite_url)
    seen: dict[str, Any] = {}
    paused = f"job-{BURST - 1:05d}"  # claimed in this round, not yet published at the probe

    def probe() -> None:
        started = time.monotonic()
        try:
            control.pause(paused)
        except StoreUnavailable as exc:
            seen["pause_error"] = exc
        seen["pause_s"] = time.monotonic() - started
        started = time.monotonic()
        key = RunKey(tick_task_id("job-00000", tick), "job-00000", tick, "auto")
        try:
            seen["claim"] = claims.claim(key, "worker:1:probe", 0, 60_000)
        except StoreUnavailable as exc:
            seen["claim_error"] = exc
        seen["claim_s"] = time.monotonic() - started

    publisher = _ProbingPublisher(CeleryPublisher(beat_app), PROBE_AT, probe)
    try:
        stats = Dispatcher(store, publisher, batch_size=BURST).run_round(now, EPOCH)
    finally:
        claims.close()
        beat_app.close()
        operator_app.close()

    assert "pause_error" not in seen and "claim_error" not in seen, seen
    assert seen["pause_s"] < PROMPT_S, seen
    assert seen["claim_s"] < PROMPT_S, seen
    assert seen["claim"] is None  # the claim was taken: a fresh tick starts
    assert stats.claimed == BURST
    assert stats.conflicts == 1  # the paused schedule, left as the operator set it
    record = store.get(paused)
    assert record is not None
    assert record.state is ScheduleState.PAUSED
    moved = store.get("job-00000")
    assert moved is not None and moved.next_tick_ms == tick + 60_000
    store.close()
