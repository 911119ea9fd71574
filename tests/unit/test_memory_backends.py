"""What the in-memory backends add beyond the contract suites: an injected clock drives expiry and
"now", several leases on one store elect one leader, and ``testing`` ships them documented."""

from __future__ import annotations

import pytest

import celery_durable_beat.testing as testing
from celery_durable_beat.exceptions import StaleEpoch
from celery_durable_beat.model import Outcome, Trigger
from celery_durable_beat.store.base import AuditEvent
from celery_durable_beat.testing import FrozenBeat, MemoryLease, MemoryStore

pytestmark = pytest.mark.unit


class Clock:
    """A hand-moved clock, in epoch ms."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def test_the_injected_clock_is_the_store_clock() -> None:
    clock = Clock(1_000)
    store = MemoryStore(clock=clock)
    assert store.now_ms() == 1_000
    clock.now_ms = 5_000
    assert store.clock_and_earliest_due() == (5_000, None)
    store.settle([AuditEvent("job", 1, None, Trigger.AUTO, Outcome.SKIPPED)], (), epoch=0)
    assert store.history("job", 1)[0].recorded_at_ms == 5_000


def test_leases_on_one_store_elect_one_leader_and_hand_over_on_expiry() -> None:
    clock = Clock(0)
    store = MemoryStore(clock=clock)
    a, b = MemoryLease(store, 10, holder="a"), MemoryLease(store, 10, holder="b")
    first = a.acquire_or_renew()
    assert first.leader and first.epoch == 1 and first.remaining_ms == 10_000
    clock.now_ms = 9_999
    standby = b.acquire_or_renew()
    assert not standby.leader and (standby.holder, standby.remaining_ms) == ("a", 1)
    clock.now_ms = 10_000  # expired by the store's clock
    taken = b.acquire_or_renew()
    assert taken.leader and taken.epoch == 2
    store.register_epoch(taken.epoch)
    assert not a.acquire_or_renew().leader
    late = AuditEvent("job", 1, "job@x", Trigger.AUTO, Outcome.ENQUEUED)
    with pytest.raises(StaleEpoch):
        store.settle([late], (), first.epoch)
    assert "MemoryLease" in repr(a)


def test_testing_exports_the_memory_backends_with_docstrings() -> None:
    for name in ("FrozenBeat", "MemoryStore", "MemoryLease"):
        assert name in testing.__all__
        assert getattr(testing, name).__doc__


def test_frozen_beat_runs_on_the_memory_store_at_the_frozen_instant() -> None:
    from celery import Celery

    app = Celery("frozen", set_as_current=False)
    app.conf.beat_schedule = {"pulse": {"task": "t", "schedule": "@every 1s"}}
    with FrozenBeat(app, start="2026-03-07T00:00:00Z") as beat:
        assert isinstance(beat.store, MemoryStore)
        assert beat.store.now_ms() == 1_772_841_600_000
        beat.advance("3s")
        assert beat.store.now_ms() == 1_772_841_603_000
        assert len(beat.store.history("pulse", 10)) == 3
