"""Several real ``celery beat`` processes, a worker, and the evidence: the audit table and the
worker's record of what it executed. Every test runs on both lease backends."""

from __future__ import annotations

import json
import shutil
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.engine import Engine

from celery_durable_beat.store.sql import SqlStore
from celery_durable_beat.store.tables import audit, schedules
from tests.support.procs import REPO, CeleryProcess, ThrowawayRedis, read_jsonl, wait_until

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


class HaRig:
    """A workdir with the test app, one worker and any number of beats on one store and lease."""

    def __init__(
        self,
        tmp: Path,
        store_url: str,
        broker_url: str,
        lease_url: str | None,
        schedule: dict[str, Any],
        ttl: float,
    ) -> None:
        self.tmp = tmp
        shutil.copy(REPO / "tests" / "support" / "beatapp.py", tmp / "beatapp.py")
        self.ticks_file = tmp / "ticks.jsonl"
        self.store_url = store_url
        self.lease_url = lease_url
        self.names = sorted(schedule)
        self.env = {
            "BEAT_BROKER": broker_url,
            "DURABLE_BEAT_URL": store_url,
            "BEAT_SCHEDULE": json.dumps(schedule),
            "TICKS_FILE": str(self.ticks_file),
            "BEAT_LEASE_TTL": str(ttl),
            "BEAT_POLL": "0.2",
            "BEAT_LEASE_URL": lease_url or "",
        }
        self.procs: list[CeleryProcess] = []
        self.beats: list[CeleryProcess] = []
        self.store = SqlStore(store_url)
        self.store.ensure_schema()  # so the evidence can be read before any beat has started
        self._engine: Engine | None = None

    # -- processes ------------------------------------------------------------------------------
    def worker(self) -> CeleryProcess:
        args = [
            "worker",
            "-P",
            "solo",
            "-l",
            "info",
            "--without-mingle",
            "--without-gossip",
            "--without-heartbeat",
        ]
        return self._start(args, "worker")

    def beat(self, name: str = "beat") -> CeleryProcess:
        proc = self._start(
            ["beat", "-S", "celery_durable_beat.Scheduler", "-l", "info", "--pidfile="], name
        )
        self.beats.append(proc)
        return proc

    def _start(self, args: list[str], name: str) -> CeleryProcess:
        proc = CeleryProcess(self.tmp, "beatapp", args, self.env, f"{name}-{len(self.procs)}")
        self.procs.append(proc)
        return proc

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
        import redis

        client = redis.Redis.from_url(self.lease_url)
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

    def executed(self) -> list[dict[str, Any]]:
        return read_jsonl(self.ticks_file)

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
                lambda: wanted <= {row["id"] for row in self.executed()},
                drain_timeout,
                "the worker to execute every enqueued tick",
            )
        except AssertionError as exc:
            missing = sorted(wanted - {row["id"] for row in self.executed()})
            raise AssertionError(f"{exc}: {len(missing)} never ran: {missing[:10]}") from None
        counts = Counter(row["id"] for row in self.executed())
        doubles = {task_id: n for task_id, n in counts.items() if n > 1}
        assert not doubles, f"executed more than once: {doubles}"
        assert set(counts) <= wanted, "a task ran that was never enqueued"
        return enqueued

    def assert_all_alive(self) -> None:
        for proc in self.procs:
            assert proc.proc.poll() is None, (
                f"{proc.log_path.name} exited:\n{proc.output()[-3000:]}"
            )

    def stop_beats(self) -> None:
        """Standbys first, then the leader, so no new leadership starts while stopping."""
        leader = self.leader()
        for beat in [b for b in self.beats if b is not leader] + ([leader] if leader else []):
            if beat.proc.poll() is None:
                code = beat.stop()
                assert code == 0, f"{beat.log_path.name} exited {code}:\n{beat.output()[-3000:]}"

    def close(self) -> None:
        for proc in self.procs:
            proc.close()
        self.store.close()
        if self._engine is not None:
            self._engine.dispose()


def every_second(*names: str) -> dict[str, Any]:
    """``@every 1s`` schedules whose missed ticks are backfilled (so an outage loses none)."""
    return {
        name: {
            "task": "beatapp.record",
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
    rigs: list[HaRig] = []

    def make(
        store_url: str,
        broker_url: str,
        lease_url: str | None,
        schedule: dict[str, Any],
        ttl: float = 30.0,
    ) -> HaRig:
        workdir = tmp_path / f"rig-{uuid.uuid4().hex[:6]}"
        workdir.mkdir()
        rig = HaRig(workdir, store_url, broker_url, lease_url, schedule, ttl)
        rigs.append(rig)
        return rig

    yield make
    for rig in rigs:
        rig.close()
