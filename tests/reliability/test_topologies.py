"""Production topologies survive their own failovers (SPEC §7), with real processes.

Each test runs a worker and two beats (one leads) on a topology of servers the test starts on
free ports, fails that topology over mid-run where it can fail over, and checks the invariant of
``HaRig.assert_exactly_once``: every tick of the run's window enqueued exactly once with no gap,
each executed once, and no beat exited or was restarted (``assert_all_alive``, exit 0 on stop).

- Redis Sentinel: a primary, a replica and three sentinels; the lease (and the guard's claims)
  on a ``sentinel://…;sentinel://…`` URL. Two failovers: ``SENTINEL FAILOVER`` first (the old
  master is demoted and answers ``READONLY`` on the connections beat holds), then the new master
  is killed; once the sentinels have promoted the other server, the lease keys are deleted on it
  too: what a replica that lagged behind the master looks like, so the epoch floor from the
  store is what keeps the new leader's epoch above every epoch already written (the lease
  module docstring).
- TLS: a Redis speaking only TLS with a certificate of a CA made by ``openssl`` for the test; the
  lease on ``rediss://…?ssl_cert_reqs=CERT_REQUIRED&ssl_ca_certs=…``.
- PostgreSQL: a primary and a streaming replica (``pg_basebackup -R``); the store (and the lease
  row in it) on a URL naming both with ``target_session_attrs=read-write``. The primary is
  stopped and the replica promoted, as a failover manager does; ``durable-beat migrate`` then
  runs on the same URL and finds the new primary.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from celery_durable_beat.redis_client import connect
from tests.reliability.conftest import every_second
from tests.support.servers import (
    SentinelRedis,
    ThrowawayPostgres,
    TlsRedis,
    multi_host_url,
)

pytestmark = [pytest.mark.reliability, pytest.mark.topology, pytest.mark.timeout(150)]

TTL = 6.0
SLOW_FAILOVERS = 8
LEASE_KEYS = ("{durable_beat}:lease", "{durable_beat}:lease:holder", "{durable_beat}:lease:epoch")


@pytest.fixture
def sentinels() -> Iterator[SentinelRedis]:
    group = SentinelRedis()
    try:
        group.start()
        yield group
    finally:
        group.close()


@pytest.fixture
def tls_redis(tmp_path: Path) -> Iterator[TlsRedis]:
    folder = tmp_path / "tls"
    folder.mkdir()
    server = TlsRedis(folder)
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture
def pg_pair() -> Iterator[tuple[ThrowawayPostgres, ThrowawayPostgres, str]]:
    """A primary with a database, and its replica streaming from it: both running."""
    primary = ThrowawayPostgres()
    made = [primary]
    try:
        primary.init()
        primary.start()
        database = f"dbt_{uuid.uuid4().hex[:16]}"
        primary.create_database(database)
        replica = primary.replica()
        made.append(replica)
        replica.start()
        yield primary, replica, database
    finally:
        for server in reversed(made):
            server.close()


def _ticks_resume(rig: Any, after_ms: int) -> None:
    """Three more ticks per schedule enqueued after ``after_ms``: the rounds go on, on the new
    primary, with no beat restarted."""
    rig.wait_ticks(3, after_ms=after_ms, timeout=60)
    rig.assert_all_alive()


def test_sentinel_failovers_are_followed_by_the_lease_and_the_claims(
    make_rig: Any, pg_url: str, private_redis: str, sentinels: SentinelRedis
) -> None:
    rig = make_rig(
        pg_url,
        private_redis,
        sentinels.url,
        every_second("s"),
        TTL,
        guard=True,
        lease_options=sentinels.options,
    )
    leader, epoch_before = rig.start_leader_and_standby()
    sentinels.fail_over(kill=False)  # demoted: the beats' connections answer READONLY
    _ticks_resume(rig, rig.store.now_ms())
    promoted = sentinels.client(sentinels.fail_over(kill=True).port)  # the master dies
    try:
        promoted.delete(*LEASE_KEYS)  # and its replica lagged: no lease, no epoch counter
        failed_over_at = rig.store.now_ms()
        _ticks_resume(rig, failed_over_at)
        rig.stop_beats()
        enqueued = rig.assert_exactly_once(drain_timeout=60)
        after = [r for r in enqueued if r.recorded_at_ms >= failed_over_at]
        # The old leader may still finish rounds under its epoch until its next renewal finds
        # the lease gone (its last one may have reached the promoted replica before the keys
        # were deleted); from the first record of a newer leadership on, none may carry it.
        newer = [r.recorded_at_ms for r in after if r.epoch > epoch_before]
        assert newer, "no leadership after the failover took a newer epoch: one was taken again"
        since = [r for r in after if r.recorded_at_ms >= min(newer)]
        assert min(r.epoch for r in since) > epoch_before, "an epoch was taken again"
        claimed = {key.decode() for key in promoted.scan_iter("durable_beat:run:*")}
        assert {f"durable_beat:run:{r.task_id}" for r in after} <= claimed
    finally:
        promoted.close()
    assert "Traceback" not in leader.output()


def test_a_tls_lease_leads_and_ticks_run(
    make_rig: Any, pg_url: str, private_redis: str, tls_redis: TlsRedis
) -> None:
    rig = make_rig(pg_url, private_redis, tls_redis.url, every_second("s"), TTL, guard=True)
    _, epoch = rig.start_leader_and_standby()
    first = rig.wait_ticks(1)[0].tick_ms
    rig.wait_ticks(3, after_ms=first)
    rig.stop_beats()
    enqueued = rig.assert_exactly_once()
    assert {r.epoch for r in enqueued} == {epoch}
    client = connect(tls_redis.url, timeout=5)
    try:  # the claims went through TLS too
        assert client.exists(f"durable_beat:run:{enqueued[-1].task_id}")
    finally:
        client.close()


def test_a_postgresql_promotion_is_followed_without_a_restart(
    make_rig: Any,
    private_redis: str,
    pg_pair: tuple[ThrowawayPostgres, ThrowawayPostgres, str],
) -> None:
    primary, replica, database = pg_pair
    url = multi_host_url(database, primary, replica)
    rig = make_rig(url, private_redis, None, every_second("s"), TTL)
    leader, epoch_before = rig.start_leader_and_standby()
    primary.stop()  # the old primary is gone before the new one takes writes: no split brain
    replica.promote()
    promoted_at = rig.store.now_ms()  # the test's own pool follows to the new primary too
    _ticks_resume(rig, promoted_at)
    migrate = rig.celery(["durable-beat", "migrate"], "migrate")
    assert migrate.wait_exit(60) == 0, migrate.tail()
    rig.stop_beats()
    enqueued = rig.assert_exactly_once(drain_timeout=60)
    assert max(r.epoch for r in enqueued) >= epoch_before
    assert "Traceback" not in leader.output()


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_many_sentinel_failovers_in_a_row(
    make_rig: Any, pg_url: str, private_redis: str, sentinels: SentinelRedis
) -> None:
    """The long variant: the master moves back and forth ``SLOW_FAILOVERS`` times, each time
    once the ticks have resumed on the previous one."""
    rig = make_rig(
        pg_url,
        private_redis,
        sentinels.url,
        every_second("s", "t"),
        TTL,
        guard=True,
        lease_options=sentinels.options,
    )
    leader, _ = rig.start_leader_and_standby()
    for _ in range(SLOW_FAILOVERS):
        sentinels.fail_over(kill=False)
        _ticks_resume(rig, rig.store.now_ms())
    rig.stop_beats()
    rig.assert_exactly_once(drain_timeout=60)
    assert "Traceback" not in leader.output()
