"""Outages with real processes (SPEC §7): PostgreSQL and Redis restart under two beats and a
worker. No process exits, the beats log and back off, and no tick is lost: the ticks of the outage
fire late (``missed: backfill``), each exactly once. Each test runs on both lease backends.

The servers here are the test's own, started on free ports, so that stopping them harms nobody
else: a PostgreSQL cluster made with ``initdb`` (once per module, a fresh database per test), a
Redis broker with an append-only file (production brokers keep their queues over a restart), and
for the Redis lease a Redis *without* persistence, so its restart also forgets the epoch counter.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from celery_durable_beat.model import Action
from tests.reliability.conftest import every_second
from tests.support.procs import CeleryProcess, ThrowawayRedis, wait_until
from tests.support.servers import PersistentRedis, ThrowawayPostgres

pytestmark = pytest.mark.reliability

TTL = 5.0
OUTAGE_S = TTL + 1.5
"""Longer than the TTL: a store lease lapses during the outage and is taken afresh after it."""


@pytest.fixture
def cluster_db(cluster: ThrowawayPostgres) -> str:
    return cluster.create_database(f"dbt_{uuid.uuid4().hex[:16]}")


def _hold_outage(leader: CeleryProcess, since: float, *causes: Action) -> None:
    """Wait until the leader has noticed the outage (a failed round is logged with the action of
    its cause, one of ``causes``), and until the outage has lasted OUTAGE_S."""
    wait_until(
        lambda: any(leader.actions(cause.value) for cause in causes),
        20,
        f"{' or '.join(c.value for c in causes)} in {leader.name}",
    )
    # The outage's length is the test's parameter, not something to poll for.
    time.sleep(max(0.0, since + OUTAGE_S - time.monotonic()))


def _host_ms() -> int:
    return time.time_ns() // 1_000_000


def _check_outage_ticks(enqueued: list[Any], down_at: int, up_at: int) -> None:
    late = [r for r in enqueued if down_at < r.tick_ms < up_at]
    assert len(late) >= OUTAGE_S - 1, f"only {len(late)} ticks of the outage were enqueued"
    assert all(r.recorded_at_ms >= up_at for r in late), "a tick was enqueued during the outage"


def test_postgresql_restart_loses_no_tick_and_no_beat_exits(
    make_rig: Any,
    cluster: ThrowawayPostgres,
    cluster_db: str,
    private_redis: str,
    lease_backend: str,
) -> None:
    lease_url = private_redis if lease_backend == "redis" else None
    rig = make_rig(cluster_db, private_redis, lease_url, every_second("s"), TTL)
    leader, _ = rig.start_leader_and_standby()
    down_at = rig.wait_mid_second()
    since = time.monotonic()
    cluster.stop()
    try:
        _hold_outage(leader, since, Action.STORE_UNAVAILABLE)
        rig.assert_all_alive()
    finally:
        up_at = _host_ms()  # the cluster runs on this host: its clock is the store's
        cluster.start()
    rig.wait_ticks(3, after_ms=up_at, timeout=30)
    rig.assert_all_alive()
    rig.stop_beats()
    _check_outage_ticks(rig.assert_exactly_once(), down_at, up_at)
    assert "Traceback" not in leader.output()


def test_redis_restart_loses_no_tick_and_no_beat_exits(
    make_rig: Any, pg_url: str, lease_backend: str
) -> None:
    broker = PersistentRedis()
    lease = ThrowawayRedis() if lease_backend == "redis" else None
    servers = [s for s in (broker, lease) if s is not None]
    for server in servers:
        server.start()
    try:
        rig = make_rig(pg_url, broker.url, lease.url if lease else None, every_second("s"), TTL)
        leader, epoch_before = rig.start_leader_and_standby()
        down_at = rig.wait_mid_second()
        since = time.monotonic()
        for server in servers:
            server.stop()
        try:
            # The broker's Redis (and, with a Redis lease, the lease's) is down.
            _hold_outage(leader, since, Action.BROKER_UNAVAILABLE, Action.LEASE_UNAVAILABLE)
            rig.assert_all_alive()
        finally:
            up_at = rig.store.now_ms()
            for server in servers:
                server.start()
        rig.wait_ticks(3, after_ms=up_at, timeout=40)
        rig.assert_all_alive()
        rig.stop_beats()
        enqueued = rig.assert_exactly_once(drain_timeout=60)
        _check_outage_ticks(enqueued, down_at, up_at)
        after = {r.epoch for r in enqueued if r.recorded_at_ms >= up_at}
        assert min(after) >= epoch_before
        if lease is not None:  # the lease's Redis forgot its counter; the store's epoch is a floor
            assert max(after) > epoch_before
    finally:
        for server in servers:
            server.close()
