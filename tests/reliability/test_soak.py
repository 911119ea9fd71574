"""The soak (issue 15): schedules ``@every 1s`` for half an hour, two beats and two workers, one
of the four killed with SIGKILL and started again every minute.

Issue 15 asks for 1,000 schedules: 1,000 runs a second. On the 2-core test machine two plain
Celery workers run 530-850 ticks a second and two with ``install(app)`` 170-260
(``bench/worker_rate.py``), beats and servers aside, so the default is 50;
``DURABLE_BEAT_SOAK_SCHEDULES=1000`` needs a machine whose workers run 1,000 a second.

What it shows: no tick lost or run twice across 30 kills of leaders, standbys and workers; the
RSS of every beat process stays flat (sampled every 10 s); the dispatch lag (the audit's
``lag_ms``: the store's clock at the round minus the planned instant) at p50 / p99.

The task is ``procapp.late_record`` (``acks_late``): a killed worker's messages in flight go back
to the queue (RabbitMQ requeues them when the connection dies; Redis after its
``visibility_timeout``) instead of being lost with it. One exception is the documented one
(docs/worker.md, guarantee 3): a tick *running* at the instant its worker is killed runs again
once its claim expires. Such a rerun is counted apart and must start after that kill; any other
second execution fails the test.

``DURABLE_BEAT_SOAK_BROKER`` picks the broker: ``redis`` (default) or ``rabbitmq`` (a queue of
the soak's own; lease and claims stay in Redis). On Redis, kombu's transport loses a message a
worker is killed in the middle of taking (``BRPOP``, then the ``unacked`` record, in two round
trips: ``bench/broker_kill_loss.py`` measures it with plain Celery workers, docs/guarantees.md),
so a gap there names the worker kill it follows; RabbitMQ has no such window.

    DURABLE_BEAT_TEST_REDIS=redis://127.0.0.1:6379/13 \
      .venv/bin/python -m pytest -m slow tests/reliability/test_soak.py -s

``DURABLE_BEAT_SOAK_MINUTES`` (30), ``DURABLE_BEAT_SOAK_SCHEDULES`` (50),
``DURABLE_BEAT_SOAK_SEED`` (printed), ``DURABLE_BEAT_SOAK_POOL`` (each worker's pool and
concurrency, ``prefork:2``) and ``DURABLE_BEAT_SOAK_REDELIVER`` (``durable_beat_redeliver_after``
in seconds; unset: off — set, a tick the broker lost is sent again, SPEC §6) change the run;
the figures are printed and written to ``soak-figures.json`` in the test's temporary folder.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select

from celery_durable_beat.model import Action
from celery_durable_beat.store.tables import audit
from tests.reliability.test_crash_consistency import wait_drained
from tests.support.procs import CeleryProcess, wait_until
from tests.support.rig import ProcessRig, rig_factory

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

MINUTES = float(os.environ.get("DURABLE_BEAT_SOAK_MINUTES", "30"))
SCHEDULE_COUNT = int(os.environ.get("DURABLE_BEAT_SOAK_SCHEDULES", "50"))
BROKER = os.environ.get("DURABLE_BEAT_SOAK_BROKER", "redis")
POOL, _, CONCURRENCY = os.environ.get("DURABLE_BEAT_SOAK_POOL", "prefork:2").partition(":")
SEED = int(os.environ.get("DURABLE_BEAT_SOAK_SEED", str(int(time.time()))))
REDELIVER = os.environ.get("DURABLE_BEAT_SOAK_REDELIVER") or None
SAMPLE_S = 10.0
KILL_EVERY_S = 60.0
ROLES = ("beat-a", "beat-b", "worker-a", "worker-b")


@dataclass
class SoakFigures:
    seed: int
    minutes: float
    schedules: int
    broker: str
    kills: dict[str, int] = field(default_factory=dict)
    executions: int = 0
    distinct_ticks: int = 0
    duplicates_published: int = 0
    duplicates_executed: int = 0
    reruns_after_worker_kill: int = 0
    gaps: list[str] = field(default_factory=list)
    enqueued_not_executed: int = 0
    redelivered: int = 0
    lag_p50_ms: float = 0.0
    lag_p99_ms: float = 0.0
    lag_max_ms: float = 0.0
    rss_mb: dict[str, list[float]] = field(default_factory=dict)
    rss_growth_mb: float = 0.0
    seconds: float = 0.0


def rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except FileNotFoundError:
        return None
    return None


class Soak:
    """The four processes, the kills, the RSS samples."""

    def __init__(self, rig: ProcessRig, rng: random.Random, figures: SoakFigures) -> None:
        self.rig = rig
        self.rng = rng
        self.figures = figures
        self.procs: dict[str, CeleryProcess] = {}
        self.worker_kills: list[float] = []
        for role in ROLES:
            self.start(role)

    def start(self, role: str) -> None:
        if role.startswith("beat"):
            proc = self.rig.beat(role)
        else:
            proc = self.rig.worker(POOL, int(CONCURRENCY or 1), ready=False)
        self.procs[role] = proc
        if role.startswith("beat"):  # one RSS series per beat process
            self.figures.rss_mb[f"{role}#{proc.proc.pid}"] = []

    def kill_one(self) -> None:
        role = self.rng.choice(ROLES)
        proc = self.procs[role]
        assert proc.alive(), f"{role} exited by itself: {proc.tail()}"
        if role.startswith("worker"):
            self.worker_kills.append(time.time())
        proc.kill()  # SIGKILL to its process group: a worker's pool children die with it
        self.figures.kills[role] = self.figures.kills.get(role, 0) + 1
        self.start(role)

    def sample(self) -> None:
        for role in ("beat-a", "beat-b"):
            proc = self.procs[role]
            mb = rss_mb(proc.proc.pid)
            if mb is not None:
                self.figures.rss_mb[f"{role}#{proc.proc.pid}"].append(round(mb, 1))

    def run(self, seconds: float) -> None:
        started = time.monotonic()
        next_kill = started + KILL_EVERY_S
        next_sample = started + SAMPLE_S
        while time.monotonic() - started < seconds:
            now = time.monotonic()
            if now >= next_sample:
                self.sample()
                next_sample += SAMPLE_S
            if now >= next_kill:
                self.kill_one()
                next_kill += KILL_EVERY_S
            for role, proc in self.procs.items():
                assert proc.alive(), f"{role} exited by itself: {proc.tail()}"
            time.sleep(0.5)  # the loop's pace: samples and kills are on the deadlines above

    def finish(self) -> None:
        """Both beats stop cleanly (SIGTERM); the workers drain what they published."""
        for role in ("beat-a", "beat-b"):
            assert self.procs[role].stop(60) == 0, self.procs[role].tail()
        wait_drained(self.rig, stall_s=120, most_s=3600)


@pytest.fixture
def soak_rig(
    request: pytest.FixtureRequest, tmp_path: Path, pg_url: str, redis_url: str
) -> Iterator[ProcessRig]:
    schedule = {
        f"soak-{i:04d}": {
            "task": "procapp.late_record",
            "schedule": "@every 1s",
            "missed": "backfill",
            "backfill_max": 1000,
        }
        for i in range(SCHEDULE_COUNT)
    }
    broker = redis_url
    own_queue: dict[str, str] = {}
    if BROKER == "rabbitmq":
        broker = str(request.getfixturevalue("amqp_url"))
        own_queue["queue"] = f"soak-{uuid.uuid4().hex[:8]}"
    with rig_factory(tmp_path, ProcessRig) as make:
        yield make(
            pg_url,
            broker,
            **own_queue,
            schedule=schedule,
            lease_url=redis_url,
            lease_ttl=5,
            poll=0.2,
            run_ttl=10,
            visibility_timeout=15,
            # Every audit record stays (the default keeps 100 a schedule): a gap must be
            # traceable to what beat recorded for the missing tick.
            history_keep=int(MINUTES * 60 * 2) + 1000,
            redeliver_after=REDELIVER,
        )


def records_of(store_url: str, schedule: str, ticks: list[int]) -> list[dict[str, Any]]:
    """Every audit record of these ticks: what beat did with a tick the worker never ran."""
    engine = create_engine(store_url)
    try:
        with engine.connect() as conn:
            query = select(audit).where(audit.c.schedule == schedule, audit.c.tick_ms.in_(ticks))
            return [dict(row._mapping) for row in conn.execute(query)]
    finally:
        engine.dispose()


def enqueued_records(store_url: str) -> list[tuple[str, int | None]]:
    """(task id, lag ms) of every ``enqueued`` audit record."""
    engine = create_engine(store_url)
    try:
        with engine.connect() as conn:
            query = select(audit.c.task_id, audit.c.lag_ms).where(
                audit.c.outcome == "enqueued", audit.c.trigger != "redeliver"
            )
            return [(str(t), lag) for t, lag in conn.execute(query)]
    finally:
        engine.dispose()


def redeliveries(store_url: str) -> int:
    """How many lost ticks beat sent again (records with trigger ``redeliver``)."""
    engine = create_engine(store_url)
    try:
        with engine.connect() as conn:
            query = select(audit.c.id).where(audit.c.trigger == "redeliver")
            return len(conn.execute(query).all())
    finally:
        engine.dispose()


def evidence(rig: ProcessRig, soak: Soak, figures: SoakFigures) -> None:
    runs = rig.rows("run")
    per_id: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        per_id[r["id"]].append(r)
    figures.executions = len(runs)
    figures.distinct_ticks = len(per_id)
    for rows in per_id.values():
        for later in sorted(rows, key=lambda r: r["t"])[1:]:
            first_t = min(r["t"] for r in rows)
            killed_between = any(first_t <= k <= later["t"] for k in soak.worker_kills)
            if killed_between:
                figures.reruns_after_worker_kill += 1
            else:
                figures.duplicates_executed += 1
    receipts = Counter(r["id"] for r in rig.receipts())
    figures.duplicates_published = sum(n - 1 for n in receipts.values())
    by_schedule: dict[str, set[int]] = defaultdict(set)
    for r in runs:
        by_schedule[r["schedule"]].add(r["tick_ms"])
    assert len(by_schedule) == SCHEDULE_COUNT
    for name, ticks in sorted(by_schedule.items()):
        ordered = sorted(ticks)
        missing = sorted(set(range(ordered[0], ordered[-1] + 1, 1000)) - ticks)
        if missing:
            found = records_of(rig.store_url, name, missing[:5])
            seen = sorted({str(r["task_id"]) for r in found} & set(receipts))
            later_kills = [k for k in soak.worker_kills if k * 1000 >= missing[0]]
            kill = f"{later_kills[0] - missing[0] / 1000:.0f} s after it" if later_kills else "none"
            figures.gaps.append(
                f"{name}: {len(missing)} missing, {missing[:5]}; audit: {found}; "
                f"received by a worker: {seen}; next worker kill: {kill}"
            )
    figures.redelivered = redeliveries(rig.store_url)
    enqueued = enqueued_records(rig.store_url)
    figures.enqueued_not_executed = len({t for t, _ in enqueued} - set(per_id))
    lags = [lag for _, lag in enqueued if lag is not None]
    cuts = statistics.quantiles(lags, n=100)
    figures.lag_p50_ms, figures.lag_p99_ms, figures.lag_max_ms = cuts[49], cuts[98], max(lags)
    growth = [
        samples[-1] - samples[min(3, len(samples) - 1)]  # after 30 s of warm-up
        for samples in figures.rss_mb.values()
        if len(samples) >= 6
    ]
    figures.rss_growth_mb = round(max(growth, default=0.0), 1)


@pytest.mark.timeout(int(MINUTES * 60) + 3 * 3600)
def test_soak(soak_rig: ProcessRig, tmp_path: Path) -> None:
    print(
        f"soak seed {SEED}: {SCHEDULE_COUNT} schedules, {MINUTES:g} min, {BROKER} broker, "
        f"redeliver_after {REDELIVER}"
    )
    started = time.monotonic()
    figures = SoakFigures(seed=SEED, minutes=MINUTES, schedules=SCHEDULE_COUNT, broker=BROKER)
    soak = Soak(soak_rig, random.Random(SEED), figures)
    wait_until(
        lambda: any(p.actions(Action.LEADERSHIP_GAINED.value) for p in soak.procs.values()),
        60,
        "a beat to lead",
    )
    soak.run(MINUTES * 60)
    soak.finish()
    evidence(soak_rig, soak, figures)
    figures.seconds = round(time.monotonic() - started, 1)
    report = asdict(figures)
    (tmp_path / "soak-figures.json").write_text(json.dumps(report, indent=2))
    summary = {k: v for k, v in report.items() if k != "rss_mb"}
    print("soak figures:", json.dumps(summary))
    assert figures.duplicates_executed == 0, summary
    assert not figures.gaps, summary
    assert figures.enqueued_not_executed == 0, summary
    assert figures.rss_growth_mb < 10, report["rss_mb"]
