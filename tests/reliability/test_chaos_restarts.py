"""Chaos proofs (issue #15): servers restarted in the middle of a burst of due ticks.

The burst: ``@every 1s`` schedules with ``missed: backfill`` and ``backfill_max: 1000``, whose
first ticks the test plans ~500 s in the past before any beat starts (beat's config sync then
finds them unchanged), as if beat had been down for eight minutes: the leader's first round
finds 500 ticks per schedule due at once, publishes them (confirmed every 200) and audits them in
one write. ``-m slow`` bursts 5,000 (ten schedules); the short run 1,000 (two schedules;
``DURABLE_BEAT_CHAOS_BURST``), as a solo worker on a loaded 2-core machine runs ~150 ticks a
second and a restart before the audit doubles what it drains. Each trial is a rig of its own (a
fresh database, Redis, queue, worker and two beats), since a burst happens once per store:

- ``store_restart`` [redis lease; store lease with ``-m slow`` only]: the store is a PostgreSQL
  cluster of the test's own (``ThrowawayPostgres``); at a random instant of the burst it is shut
  down fast (``pg_ctl stop -m fast``: every session cut, open transactions rolled back) and
  started again, at once or after 0.5-3 s. On the store lease the lease row and the worker
  guard's claims go down with it;
- ``rabbitmq_restart`` [redis lease]: the broker is a RabbitMQ node of the test's own
  (``ThrowawayRabbit``: node name, ports, data and Erlang cookie in a temporary folder; the
  machine's shared node is never touched), beat publishing with publisher confirms to a durable
  queue; at a random instant of the burst the node is stopped (``rabbitmqctl stop``) and started
  again after 0-2 s (its boot takes ~7 s more). The store is on the private cluster, the lease
  and the guard's claims in Redis; the worker is prefork (2), see ``burst_trial``.

The random instant: half the trials a uniform 0-4 s after a beat leads, half aimed into the
publishing: once the broker has taken a random 1-90 % of the burst's messages. The invariant
afterwards is the one of ``test_chaos.py`` (``ChaosRig.check``): every tick of every schedule
from its first (the burst's oldest) on, enqueued once and executed once, no gap, one beat per
epoch, no beat exited; and the burst really was one (99 % of it older than the seeding). Seeds
as in ``test_chaos.py``; a trial costs a rig, so the short version runs
``DURABLE_BEAT_CHAOS_BURST_TRIALS`` (1) per case, ``-m slow`` a fifth of the slow trials.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from celery_durable_beat.celery_config import definitions_from_app
from celery_durable_beat.settings import Settings
from celery_durable_beat.store.sql import SqlStore
from celery_durable_beat.sync import sync_definitions
from tests.reliability.chaos_rig import ChaosRig, Figures
from tests.support.chaos import SEED, SLOW_TRIALS
from tests.support.procs import ThrowawayRedis, wait_until
from tests.support.servers import ThrowawayPostgres, ThrowawayRabbit

pytestmark = [pytest.mark.reliability, pytest.mark.chaos]

FULL_BURST = 5_000
CI_BURST = int(os.environ.get("DURABLE_BEAT_CHAOS_BURST") or 1_000)
"""The short version's burst: a solo worker on this 2-core machine runs ~150 ticks a second, and
a restart before the audit doubles the messages to drain; ``-m slow`` bursts FULL_BURST."""
TRIALS = int(os.environ.get("DURABLE_BEAT_CHAOS_BURST_TRIALS") or 1)
SLOW_BURST_TRIALS = max(1, SLOW_TRIALS // 5)
"""A trial is a whole rig and a burst to drain: a fifth of the other scenarios' trials."""
PER_SCHEDULE = 500
"""Ticks of the burst per schedule: half of ``backfill_max`` (1000), so a restart that outlasts
the burst's start by minutes still drops none (``backfill`` keeps the most recent 1000)."""


def burst_schedules(burst: int) -> dict[str, Any]:
    """``@every 1s`` schedules that backfill PER_SCHEDULE ticks each."""
    return {
        f"burst-{i}": {
            "task": "procapp.record",
            "schedule": "@every 1s",
            "missed": "backfill",
            "backfill_max": 1000,
        }
        for i in range(max(1, burst // PER_SCHEDULE))
    }


def behind_ms(burst: int) -> int:
    """How far back the first ticks are planned: PER_SCHEDULE ticks, less the few that fall due
    while the beats start."""
    return (min(burst, PER_SCHEDULE) - 3) * 1000


def seed_burst(store_url: str, burst: int) -> int:
    """Plan every burst schedule's first tick ``behind_ms`` ago, as beat's own sync would have
    then; the store's now (ms) at seeding."""
    app = Celery("seed", set_as_current=False)
    app.conf.update(beat_schedule=burst_schedules(burst), timezone="UTC")
    store = SqlStore(store_url)
    try:
        now_ms = store.now_ms()
        definitions = definitions_from_app(app, Settings.from_conf(app.conf, environ={}))
        sync_definitions(store, definitions, now_ms - behind_ms(burst))
    finally:
        store.close()
    app.close()
    return now_ms


# -- the servers restarted --------------------------------------------------------------------
def restart_store(cluster: ThrowawayPostgres, rng: random.Random, figures: Figures) -> None:
    cluster.stop()
    if rng.random() < 0.5:
        figures.fault("pg_fast_restart")
    else:
        figures.fault("pg_fast_stop_then_start")
        time.sleep(rng.uniform(0.5, 3.0))  # how long the store stays down: a parameter
    cluster.start()


def restart_broker(rabbit: ThrowawayRabbit, rng: random.Random, figures: Figures) -> None:
    rabbit.stop()
    figures.fault("rabbitmq_stop_then_start")
    time.sleep(rng.uniform(0.0, 2.0))  # how long the broker stays down: a parameter
    rabbit.start()


def strike_mid_burst(rig: ChaosRig, rng: random.Random, figures: Figures, burst: int) -> None:
    """Return at the trial's random instant of the burst (see the module)."""
    rig.wait_leader()
    if rng.random() < 0.5:
        time.sleep(rng.uniform(0.0, 4.0))  # the instant: a parameter, not a wait
        return
    aim = rng.randint(1, burst * 9 // 10)
    wait_until(
        lambda: rig.queued() + len(rig.receipts()) >= aim,
        60,
        f"{aim} of the burst's messages at the broker",
        interval=0.01,
    )
    figures.fault(f"aimed_at_{10 * aim // burst}0pct_published")


# -- one trial ----------------------------------------------------------------------------------
class BurstCase:
    """What a trial of one case needs: a fresh rig on demand, and the restart of its server."""

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path, scenario: str) -> None:
        self.request = request
        self.tmp_path = tmp_path
        self.scenario = scenario
        self.cluster: ThrowawayPostgres = request.getfixturevalue("cluster")
        self.rabbit: ThrowawayRabbit | None = None
        if scenario == "rabbitmq_restart":
            self.rabbit = request.getfixturevalue("rabbit")

    def restart(self, rng: random.Random, figures: Figures) -> None:
        if self.rabbit is None:
            restart_store(self.cluster, rng, figures)
        else:
            restart_broker(self.rabbit, rng, figures)


def burst_trial(
    case: BurstCase, lease: str, rng: random.Random, figures: Figures, n: int, burst: int
) -> None:
    """One rig, one burst, one restart at a random instant of it; then the invariant."""
    redis = ThrowawayRedis()
    redis.start()
    store_url = case.cluster.create_database(f"burst_{uuid.uuid4().hex[:12]}")
    broker = redis.url if case.rabbit is None else case.rabbit.url
    workdir = case.tmp_path / f"trial-{n}"
    workdir.mkdir()
    lease_url = redis.url if lease == "redis" else None
    schedules = burst_schedules(burst)
    rig = ChaosRig(workdir, store_url, broker, lease_url, schedules, history_keep=burst)
    try:
        if case.rabbit is not None:  # a queue of the trial's own on the module's node
            rig.env["TASK_QUEUE"] = f"burst-{uuid.uuid4().hex[:8]}"
        seeded_ms = seed_burst(store_url, burst)
        # On RabbitMQ a restart before the audit can make beats publish the burst two or three
        # times over (docs/guarantees.md): two worker processes drain those in the deadline.
        rig.worker("solo" if case.rabbit is None else "prefork", 2, ready=False)
        rig.beat("beat-a")
        rig.beat("beat-b")
        strike_mid_burst(rig, rng, figures, burst)
        audited = len(rig.enqueued())
        figures.fault("struck_before_audit" if audited < burst * 0.95 else "struck_after_audit")
        case.restart(rng, figures)
        # After the heal beat republishes what the fault left unaudited, and the worker runs the
        # burst and refuses its duplicates: both grow with the burst (a loaded 2-core machine
        # publishes a few hundred and runs ~30-150 a second), so the deadlines do too.
        rig.check(
            rig.store.now_ms(),
            drain_timeout=max(180.0, burst * 0.15),
            ticks_timeout=30 + burst / 40,
        )
        backlog = [r for r in rig.enqueued() if r.tick_ms < seeded_ms]
        assert len(backlog) >= burst * 0.99, f"the burst was only {len(backlog)} ticks"
        rig.figures(figures, lag_since_ms=seeded_ms)
    finally:
        rig.close()
        redis.close()


def run_bursts(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    scenario: str,
    lease: str,
    trials: int,
    burst: int,
) -> Figures:
    case = BurstCase(request, tmp_path, scenario)
    rng = random.Random(f"{SEED}:{scenario}:{lease}")
    figures = Figures(scenario, SEED, lease)
    print(f"chaos {scenario} [{lease} lease]: seed {SEED}, {trials} trials of a {burst} burst")
    for trial in range(1, trials + 1):
        where = f"{scenario} [{lease}] trial {trial}/{trials} (DURABLE_BEAT_CHAOS_SEED={SEED})"
        try:
            burst_trial(case, lease, rng, figures, trial, burst)
        except AssertionError as exc:
            raise AssertionError(f"{where}: {exc}") from None
        figures.trials += 1
    report = figures.report(tmp_path)
    assert figures.duplicates_executed == 0, report
    return figures


@pytest.fixture(scope="module")
def rabbit() -> Iterator[ThrowawayRabbit]:
    server = ThrowawayRabbit()
    server.start()
    yield server
    server.close()


CASES = [("store_restart", "redis"), ("rabbitmq_restart", "redis")]
SLOW_CASES = [*CASES, ("store_restart", "store")]
"""The store lease under a store restart runs with ``-m slow`` only: the short run's minutes."""


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("scenario", "lease"), CASES)
def test_restart_mid_burst(
    request: pytest.FixtureRequest, tmp_path: Path, scenario: str, lease: str
) -> None:
    assert run_bursts(request, tmp_path, scenario, lease, TRIALS, CI_BURST).trials == TRIALS


@pytest.mark.slow
@pytest.mark.timeout(4 * 3600)
@pytest.mark.parametrize(("scenario", "lease"), SLOW_CASES)
def test_restart_mid_burst_long(
    request: pytest.FixtureRequest, tmp_path: Path, scenario: str, lease: str
) -> None:
    figures = run_bursts(request, tmp_path, scenario, lease, SLOW_BURST_TRIALS, FULL_BURST)
    assert figures.trials == SLOW_BURST_TRIALS
