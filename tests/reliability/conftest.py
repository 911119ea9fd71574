"""Several real ``celery beat`` processes, a worker, and the evidence: the audit table and the
worker's record of what it executed. Every test runs on both lease backends."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.engine import Engine

from celery_durable_beat.redis_client import connect
from celery_durable_beat.store.sql import SqlStore
from celery_durable_beat.store.tables import audit, schedules
from tests.support.procs import CeleryProcess, ThrowawayRedis, wait_until
from tests.support.rig import ProcessRig, rig_factory
from tests.support.servers import ThrowawayPostgres

HOLDER_KEY = "{durable_beat}:lease:holder"


@dataclass(frozen=True)
class Record:
    """One audit row, as the tests read it."""

    schedule: str
    tick_ms: int
    task_id: str | None
    outcome: str
    reason: str | None
    epoch: int
    recorded_at_ms: int


class HaRig(ProcessRig):
    """One worker and any number of beats on one store and lease, all with one schedule, and
    no worker guard (unless ``guard``): each tick executed exactly once must then be beat's
    doing alone."""

    def __init__(
        self,
        workdir: Path,
        store_url: str,
        broker_url: str,
        lease_url: str | None,
        schedule: dict[str, Any],
        ttl: float = 30.0,
        *,
        guard: bool = False,
        lease_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(
            workdir,
            store_url,
            broker_url,
            schedule=schedule,
            lease_url=lease_url,
            lease_options=lease_options,
            lease_ttl=ttl,
            poll=0.2,
            guard=guard,
        )
        self.lease_url = lease_url
        self.lease_options = lease_options
        self.names = sorted(schedule)
        self.store = SqlStore(store_url)
        self._engine: Engine | None = None

    def start_leader_and_standby(self) -> tuple[CeleryProcess, int]:
        """A worker, beat-a and beat-b; once one leads and 3 ticks are enqueued: the leader and
        the epoch of the last tick."""
        self.worker(ready=False)
        self.beat("beat-a")
        self.beat("beat-b")
        leader = self.wait_leader()
        return leader, self.wait_ticks(3)[-1].epoch

    def leader(self) -> CeleryProcess | None:
        """The beat process the lease names (by the pid in ``hostname:pid``)."""
        holder = self._holder()
        if not holder:
            return None
        pid = int(holder.rsplit(":", 1)[1])
        return next((b for b in self.beats if b.proc.pid == pid and b.proc.poll() is None), None)

    def _holder(self) -> str | None:
        if self.lease_url is None:
            info = self.store.leader_info()
            live = info.expires_at_ms is not None and info.expires_at_ms > self.store.now_ms()
            return info.holder if live else None
        client = connect(self.lease_url, self.lease_options, timeout=5)
        try:
            value = client.get(HOLDER_KEY)
        finally:
            client.close()
        return value.decode() if value else None

    def wait_leader(self, timeout: float = 30) -> CeleryProcess:
        return wait_until(self.leader, timeout, "a beat to lead")

    # -- evidence -------------------------------------------------------------------------------
    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = create_engine(self.store_url, pool_pre_ping=True)
        return self._engine

    def records(self, outcome: str | None = None) -> list[Record]:
        query = select(audit).order_by(audit.c.id)
        if outcome is not None:
            query = query.where(audit.c.outcome == outcome)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [
            Record(r.schedule, r.tick_ms, r.task_id, r.outcome, r.reason, r.epoch, r.recorded_at_ms)
            for r in rows
        ]

    def enqueued(self) -> list[Record]:
        return self.records("enqueued")

    def schedule_epochs(self) -> set[int]:
        with self.engine.connect() as conn:
            return set(conn.execute(select(schedules.c.epoch)).scalars())

    def wait_ticks(self, count: int, after_ms: int = 0, timeout: float = 30) -> list[Record]:
        """Wait until every schedule has ``count`` enqueued ticks later than ``after_ms``."""

        def enough() -> list[Record]:
            found = [r for r in self.enqueued() if r.tick_ms > after_ms]
            per = Counter(r.schedule for r in found)
            return found if all(per[n] >= count for n in self.names) else []

        return wait_until(enough, timeout, f"{count} ticks per schedule after {after_ms}", 0.1)

    def wait_mid_second(self) -> int:
        """Until the store's clock is mid-second, between two ``@every 1s`` rounds; its time."""
        return wait_until(
            lambda: (now := self.store.now_ms()) % 1000 in range(400, 600) and now,
            5,
            "mid-second",
            interval=0.02,
        )

    def assert_exactly_once(self, drain_timeout: float = 30) -> list[Record]:
        """Each schedule's ticks: every one enqueued exactly once, no gap; each executed once."""
        enqueued = self.enqueued()
        for name in self.names:
            ticks = sorted(r.tick_ms for r in enqueued if r.schedule == name)
            assert ticks, f"schedule {name} has no tick"
            assert len(ticks) == len(set(ticks)), f"{name}: a tick enqueued twice"
            gaps = sorted(set(range(ticks[0], ticks[-1] + 1, 1000)) - set(ticks))
            assert not gaps, f"{name}: ticks {gaps} were never enqueued"
        wanted = {r.task_id for r in enqueued}
        try:
            wait_until(
                lambda: wanted <= {row["id"] for row in self.rows()},
                drain_timeout,
                "the worker to execute every enqueued tick",
            )
        except AssertionError as exc:
            missing = sorted(wanted - {row["id"] for row in self.rows()})
            raise AssertionError(f"{exc}: {len(missing)} never ran: {missing[:10]}") from None
        counts = Counter(row["id"] for row in self.rows())
        doubles = {task_id: n for task_id, n in counts.items() if n > 1}
        assert not doubles, f"executed more than once: {doubles}"
        assert set(counts) <= wanted, "a task ran that was never enqueued"
        return enqueued

    def stop_beats(self) -> None:
        """Standbys first, then the leader, so no new leadership starts while stopping."""
        leader = self.leader()
        for beat in [b for b in self.beats if b is not leader] + ([leader] if leader else []):
            if beat.proc.poll() is None:
                code = beat.stop()
                assert code == 0, f"{beat.log_path.name} exited {code}:\n{beat.output()[-3000:]}"

    def close(self) -> None:
        super().close()
        self.store.close()
        if self._engine is not None:
            self._engine.dispose()


def every_second(*names: str) -> dict[str, Any]:
    """``@every 1s`` schedules whose missed ticks are backfilled (so an outage loses none)."""
    return {
        name: {
            "task": "procapp.record",
            "schedule": "@every 1s",
            "missed": "backfill",
            "backfill_max": 100,
        }
        for name in names
    }


@pytest.fixture
def private_redis() -> Iterator[str]:
    """A redis-server of the test's own: no other test run can consume its queue or flush it."""
    server = ThrowawayRedis()
    server.start()
    yield server.url
    server.close()


@pytest.fixture(params=["store", "redis"])
def lease_backend(request: pytest.FixtureRequest) -> str:
    """Which lease the beats elect with: the store's fence row or Redis."""
    return str(request.param)


@pytest.fixture
def make_rig(tmp_path: Path) -> Iterator[Any]:
    """``make_rig(store_url, broker_url, lease_url, schedule, ttl=30.0)``: a HaRig of its own."""
    with rig_factory(tmp_path, HaRig) as make:
        yield make


@pytest.fixture(scope="module")
def cluster() -> Iterator[ThrowawayPostgres]:
    """A PostgreSQL cluster of the module's own, to stop and restart (outages, restarts)."""
    server = ThrowawayPostgres()
    server.init()
    server.start()
    yield server
    server.close()
