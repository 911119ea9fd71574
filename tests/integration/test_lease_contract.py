"""The lease rules of ``lease/base.py`` held against every backend: the store lease on SQLite and
PostgreSQL, the in-memory lease on a MemoryStore, and the Redis lease (with a PostgreSQL store for
its epochs), in-process, with several lease objects standing for several beats. TTLs are short
and waits are deadline polls."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from celery_durable_beat.backends import make_lease
from celery_durable_beat.exceptions import ConfigError, LeaseError, StaleEpoch
from celery_durable_beat.lease.base import Lease, LeaseStatus
from celery_durable_beat.lease.memory import MemoryLease
from celery_durable_beat.lease.redis import DEFAULT_KEY, RedisLease, lease_key
from celery_durable_beat.lease.sql import StoreLease
from celery_durable_beat.model import Outcome, Trigger
from celery_durable_beat.settings import Settings
from celery_durable_beat.store.base import AuditEvent
from celery_durable_beat.store.memory import MemoryStore
from celery_durable_beat.store.sql import SqlStore
from tests.support.procs import free_port, wait_until
from tests.support.stores import open_store

pytestmark = pytest.mark.integration

BACKENDS = ["store-sqlite", "store-postgresql", "store-memory", "redis"]
SERVERS = pytest.mark.parametrize("backend", ["store-postgresql", "redis"], indirect=True)
"""Backends with a server of their own (a clock other than this host's, a socket that can fail);
the memory lease, like SQLite, runs on its store's clock, which is this host's by default."""
STORE_LEASES = pytest.mark.parametrize(
    "backend", ["store-sqlite", "store-postgresql", "store-memory"], indirect=True
)


@dataclass
class Backend:
    """A store and a way to make leases (one per would-be beat) on one backend."""

    name: str
    store: SqlStore | MemoryStore
    redis_url: str | None

    def lease(self, holder: str, ttl: float = 30.0) -> Lease:
        if isinstance(self.store, MemoryStore):
            return MemoryLease(self.store, ttl, holder=holder)
        if self.redis_url is None:
            return StoreLease(self.store, ttl, holder=holder)
        return RedisLease(
            self.redis_url, ttl, holder=holder, epoch_floor=lambda: self.store.leader_info().epoch
        )

    def free(self) -> bool:
        """Whether the lease is free or expired by the backend's own clock (nobody acquires)."""
        if self.redis_url is None:
            info = self.store.leader_info()
            return info.expires_at_ms is None or info.expires_at_ms <= self.store.now_ms()
        import redis

        client = redis.Redis.from_url(self.redis_url)
        try:
            return not client.exists(DEFAULT_KEY)
        finally:
            client.close()

    def gain(self, status: LeaseStatus) -> None:
        """What the scheduler does on gaining: tell the store the epoch (a no-op for the store)."""
        assert status.leader
        self.store.register_epoch(status.epoch)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    name = request.param
    kind = {"store-sqlite": "sqlite", "store-memory": "memory"}.get(name, "postgresql")
    url = {"sqlite": "sqlite_url", "postgresql": "pg_url"}.get(kind)
    redis_url = request.getfixturevalue("redis_url") if name == "redis" else None
    store = open_store(kind, None if url is None else request.getfixturevalue(url))
    assert isinstance(store, SqlStore | MemoryStore)
    yield Backend(name, store, redis_url)
    store.close()


@pytest.fixture
def leases() -> Iterator[list[Lease]]:
    """Leases made by a test, closed after it."""
    made: list[Lease] = []
    yield made
    for lease in made:
        lease.close()


def _make(backend: Backend, leases: list[Lease], holder: str, ttl: float = 30.0) -> Lease:
    lease = backend.lease(holder, ttl)
    leases.append(lease)
    return lease


def test_first_leads_and_the_second_stands_by_knowing_who_leads(
    backend: Backend, leases: list[Lease]
) -> None:
    a, b = _make(backend, leases, "host-a:1"), _make(backend, leases, "host-b:2")
    first = a.acquire_or_renew()
    assert first.leader and first.epoch >= 1 and first.holder == "host-a:1"
    standby = b.acquire_or_renew()
    assert not standby.leader
    assert (standby.holder, standby.epoch) == ("host-a:1", first.epoch)
    assert standby.expires_at_ms is not None and standby.expires_at_ms > backend.store.now_ms()
    assert standby.remaining_ms is not None and 0 < standby.remaining_ms <= 30_000
    assert first.remaining_ms == 30_000


def test_renewal_keeps_the_epoch_and_moves_the_expiry(
    backend: Backend, leases: list[Lease]
) -> None:
    a = _make(backend, leases, "a")
    first = a.acquire_or_renew()
    assert first.expires_at_ms is not None
    first_expiry = first.expires_at_ms

    def moved() -> LeaseStatus | None:
        status = a.acquire_or_renew()
        return status if (status.expires_at_ms or 0) > first_expiry else None

    later = wait_until(moved, 5, "a renewal that moves the expiry", interval=0.02)
    assert later.leader and later.epoch == first.epoch


def test_only_the_holder_releases_and_the_next_acquisition_bumps_the_epoch(
    backend: Backend, leases: list[Lease]
) -> None:
    a, b = _make(backend, leases, "a"), _make(backend, leases, "b")
    held = a.acquire_or_renew()
    b.release()  # not the holder: nothing happens
    assert not b.acquire_or_renew().leader
    assert a.acquire_or_renew().epoch == held.epoch
    a.release()
    a.release()  # idempotent
    taken = b.acquire_or_renew()
    assert taken.leader and taken.epoch == held.epoch + 1
    assert not a.acquire_or_renew().leader


def test_every_new_acquisition_increments_the_epoch(backend: Backend, leases: list[Lease]) -> None:
    beats = [_make(backend, leases, f"beat-{i}") for i in range(3)]
    epochs = []
    for turn in range(6):
        status = beats[turn % 3].acquire_or_renew()
        assert status.leader
        backend.gain(status)
        epochs.append(status.epoch)
        beats[turn % 3].release()
    assert epochs == list(range(epochs[0], epochs[0] + 6))
    assert backend.store.leader_info().epoch == epochs[-1]


def test_expiry_by_the_backend_clock_hands_over_and_the_old_holder_cannot_renew(
    backend: Backend, leases: list[Lease]
) -> None:
    ttl = 1.0
    a, b = _make(backend, leases, "a", ttl), _make(backend, leases, "b", ttl)
    old = a.acquire_or_renew()
    backend.gain(old)
    held_at = time.monotonic()
    assert not b.acquire_or_renew().leader
    new = wait_until(
        lambda: (s := b.acquire_or_renew()).leader and s, 5, "b to take over", interval=0.02
    )
    waited = time.monotonic() - held_at
    assert waited >= ttl * 0.9, f"taken over after {waited:.2f}s, before the {ttl}s TTL ran out"
    assert new.epoch == old.epoch + 1
    backend.gain(new)
    late = a.acquire_or_renew()  # a renewal after expiry and someone else's acquisition fails
    assert not late.leader and (late.holder, late.epoch) == ("b", new.epoch)
    a.release()  # and the old holder cannot release it either
    assert b.acquire_or_renew().leader and b.acquire_or_renew().epoch == new.epoch
    stale = AuditEvent("s", 1000, "s@x", Trigger.AUTO, Outcome.ENQUEUED, version=1)
    with pytest.raises(StaleEpoch):  # the store refuses the old leader's writes
        backend.store.settle([stale], (), old.epoch)


def test_an_expired_lease_taken_back_by_its_holder_is_a_new_epoch(
    backend: Backend, leases: list[Lease]
) -> None:
    a = _make(backend, leases, "a", 0.3)
    first = a.acquire_or_renew()
    assert not backend.free()
    wait_until(backend.free, 5, "the lease to expire", interval=0.02)
    again = a.acquire_or_renew()
    assert again.leader and again.epoch > first.epoch


@SERVERS  # SQLite has no server: there the host clock is the database's clock
@pytest.mark.parametrize("skew_s", [3600.0, -3600.0])
def test_the_host_clock_is_never_consulted(
    backend: Backend, leases: list[Lease], monkeypatch: pytest.MonkeyPatch, skew_s: float
) -> None:
    a, b = _make(backend, leases, "a", 5.0), _make(backend, leases, "b", 5.0)
    assert a.acquire_or_renew().leader
    real_time, real_ns = time.time, time.time_ns
    monkeypatch.setattr(time, "time", lambda: real_time() + skew_s)
    monkeypatch.setattr(time, "time_ns", lambda: real_ns() + int(skew_s * 1e9))
    assert not b.acquire_or_renew().leader
    assert a.acquire_or_renew().leader


def test_standbys_racing_for_a_free_lease_elect_exactly_one(
    backend: Backend, leases: list[Lease]
) -> None:
    racers = [_make(backend, leases, f"racer-{i}") for i in range(8)]
    start = threading.Barrier(len(racers))
    answers: list[LeaseStatus] = []
    lock = threading.Lock()

    def race(lease: Lease) -> None:
        start.wait()
        status = lease.acquire_or_renew()
        with lock:
            answers.append(status)

    threads = [threading.Thread(target=race, args=(lease,)) for lease in racers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(answers) == len(racers)
    winners = [s for s in answers if s.leader]
    assert len(winners) == 1
    assert {s.epoch for s in answers} == {winners[0].epoch}


@SERVERS
def test_a_failing_backend_raises_lease_error(backend: Backend, leases: list[Lease]) -> None:
    port = free_port()  # nothing listens there
    if backend.redis_url is not None:
        broken: Lease = RedisLease(f"redis://:secret@127.0.0.1:{port}/0", 1.0)
    else:
        broken = StoreLease(SqlStore(f"postgresql://postgres:secret@127.0.0.1:{port}/x"), 1.0)
    leases.append(broken)
    with pytest.raises(LeaseError) as failed:
        broken.acquire_or_renew()
    assert "secret" not in str(failed.value)
    with pytest.raises(LeaseError):
        broken.release()


@pytest.mark.parametrize("backend", ["redis"], indirect=True)
def test_redis_forgetting_its_counter_never_reuses_an_epoch(
    backend: Backend, leases: list[Lease]
) -> None:
    """A restart without persistence or a failover loses the counter: the store's epoch is the
    floor of the next one."""
    import redis

    assert backend.redis_url is not None

    backend.store.register_epoch(41)  # e.g. epochs a store lease handed out before the switch
    a = _make(backend, leases, "a")
    first = a.acquire_or_renew()
    assert first.epoch == 42
    backend.gain(first)
    redis.Redis.from_url(backend.redis_url).flushdb()  # Redis restarted empty
    again = a.acquire_or_renew()  # the key is gone: taking it back is a new acquisition
    assert again.leader and again.epoch == 43
    backend.gain(again)
    a.release()
    b = _make(backend, leases, "b")
    assert b.acquire_or_renew().epoch == 44


def test_each_namespace_has_its_own_redis_lease_keys_and_epoch(redis_url: str) -> None:
    """SPEC §16: two namespaces' beats on one Redis both lead, each with its own epoch; the
    keys keep the ``{durable_beat}`` hash tag (one slot for a script's keys on a cluster), and the
    default namespace's are exactly those of releases before namespaces."""
    import redis

    assert lease_key(None) == DEFAULT_KEY == "{durable_beat}:lease"
    assert lease_key("alpha") == "{durable_beat}:alpha:lease"
    made = [
        RedisLease(redis_url, 30.0, holder=f"{ns}-beat", epoch_floor=lambda: 0, key=lease_key(ns))
        for ns in (None, "alpha", "beta")
    ]
    try:
        default, alpha, beta = (lease.acquire_or_renew() for lease in made)
        assert default.leader and alpha.leader and beta.leader
        assert alpha.epoch == beta.epoch == default.epoch == 1  # three counters
        made[1].release()
        again = made[1].acquire_or_renew()
        assert again.leader and again.epoch == 2
        assert made[2].acquire_or_renew().epoch == 1  # beta's untouched
        client = redis.Redis.from_url(redis_url)
        try:
            assert {key.decode() for key in client.keys("*durable_beat*")} == {
                f"{{durable_beat}}{tail}"
                for ns in ("", ":alpha", ":beta")
                for tail in (f"{ns}:lease", f"{ns}:lease:holder", f"{ns}:lease:epoch")
            }
        finally:
            client.close()
    finally:
        for lease in made:
            lease.close()


@STORE_LEASES
def test_the_store_lease_is_the_fence_row(backend: Backend, leases: list[Lease]) -> None:
    a = _make(backend, leases, "host-a:7", 30.0)
    status = a.acquire_or_renew()
    info = backend.store.leader_info()
    assert (info.holder, info.epoch, info.expires_at_ms) == (
        "host-a:7",
        status.epoch,
        status.expires_at_ms,
    )
    a.release()
    info = backend.store.leader_info()
    assert (info.holder, info.epoch, info.expires_at_ms) == (None, status.epoch, None)


@STORE_LEASES
def test_a_store_lease_never_adopts_an_epoch_it_did_not_acquire(
    backend: Backend, leases: list[Lease]
) -> None:
    """A Redis-lease beat on the same store (a misconfiguration) registered a newer epoch: the
    store-lease holder must not keep writing beside it under that epoch."""
    a = _make(backend, leases, "a", 0.3)
    mine = a.acquire_or_renew()
    backend.store.register_epoch(mine.epoch + 3)
    refused = a.acquire_or_renew()
    assert not refused.leader and refused.epoch == mine.epoch + 3
    wait_until(backend.free, 5, "the unrenewed lease to expire", interval=0.02)
    again = a.acquire_or_renew()
    assert again.leader and again.epoch == mine.epoch + 4


def _settings(**values: object) -> Settings:
    return Settings.from_conf({f"durable_beat_{k}": v for k, v in values.items()}, environ={})


def test_make_lease_picks_the_backend_from_settings(sqlite_url: str, redis_url: str) -> None:
    store = SqlStore(sqlite_url)
    try:
        assert isinstance(make_lease(_settings(url=sqlite_url), store), StoreLease)
        lease = make_lease(_settings(url=sqlite_url, lease_url=redis_url, lease_ttl=7), store)
        assert isinstance(lease, RedisLease) and lease.ttl_seconds == 7
        lease.close()
        with pytest.raises(ConfigError, match="durable_beat_lease_url") as bad:
            make_lease(_settings(url=sqlite_url, lease_url="http://u:pw@host/0"), store)
        assert "pw" not in str(bad.value)
    finally:
        store.close()
