"""Chaos proofs (issue #15): faults at random instants between real processes and their servers.

Two real ``celery beat`` processes and a ``celery worker`` with ``install(app)`` (the guard) on
PostgreSQL (the store) and a Redis of the test's own (the broker, the lease and the guard's
claims). Each beat reaches all three through proxies of its own (``tests/support/faultproxy.py``),
so a fault can hit the leader alone while its standby sees healthy servers; the worker connects
directly. Schedules are ``@every 1s`` with ``missed: backfill``, the lease TTL is 2 s.

Scenarios, each a series of trials at random instants drawn from a printed seed
(``tests/support/chaos.py``):

- ``store_hang``: the leader's PostgreSQL connections hang (nothing forwarded either way) until
  a standby has taken over, i.e. longer than the TTL, then heal, the held bytes delivered late;
  in half the trials they are slowed first (each statement late by 50-300 ms), which stretches
  the round so that the hang most likely strikes in its middle;
- ``lease_unreachable``: the leader's Redis lease is dropped (connections reset, new ones
  refused) or hangs, the store stays fine, until a standby has taken over;
- ``leader_sigstop``: the leader stops itself (SIGSTOP, ``DURABLE_BEAT_FAULT=after_publish:N:stop``)
  between publishing a round and auditing it, stays stopped while a standby takes over, and is
  continued: it is fenced out, writes nothing, and stands by (then it is replaced by a fresh
  beat armed the same way, for the next trial);
- ``broker_hang``: the leader's broker connections hang in the middle of publishing, either
  briefly (less than the TTL) or until a standby has taken over.

After each trial, for every schedule, from its first tick to the last tick every schedule has
been enqueued after the heal: every tick enqueued (audit) exactly once and executed (the worker's
ticks file) exactly once, no gap, and every beat process still alive. Duplicates the faults made
beats publish are counted (the worker's receipts), never executed (the guard refuses them).

``DURABLE_BEAT_CHAOS_SEED`` replays a run; ``DURABLE_BEAT_CHAOS_TRIALS`` sets the short version's
trials (2 per scenario), ``-m slow`` runs ``DURABLE_BEAT_CHAOS_SLOW_TRIALS`` (25) per scenario
and prints the figures (also in ``chaos-<scenario>.json`` in the test's temporary folder).
"""

from __future__ import annotations

import json
import random
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest

from celery_durable_beat.model import Action
from tests.reliability.conftest import HaRig, Record, every_second
from tests.support.chaos import SEED, SLOW_TRIALS, TRIALS
from tests.support.faultproxy import FaultProxy
from tests.support.procs import CeleryProcess, wait_until
from tests.support.rig import rig_factory

pytestmark = [pytest.mark.reliability, pytest.mark.chaos]

TTL = 2.0
SCHEDULES = every_second(*(f"chaos-{i}" for i in range(5)))
STOPPED = "durable-beat fault stopped at after_publish"
LOST = Action.LEADERSHIP_LOST.value


@dataclass
class Figures:
    """What one scenario's run did and saw."""

    scenario: str
    seed: int
    trials: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    takeovers: int = 0
    executions: int = 0
    duplicates_published: int = 0
    duplicates_executed: int = 0
    gaps: int = 0
    max_handover_ms: int = 0
    lag_p99_ms: int = 0
    seconds: float = 0.0

    def fault(self, kind: str) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + 1

    def handover(self, ms: int) -> None:
        self.takeovers += 1
        self.max_handover_ms = max(self.max_handover_ms, ms)


@dataclass
class Paths:
    """One beat's proxies: to the store, the lease and the broker."""

    store: FaultProxy
    lease: FaultProxy
    broker: FaultProxy

    def close(self) -> None:
        for proxy in (self.store, self.lease, self.broker):
            proxy.close()


class ChaosRig(HaRig):
    """A HaRig with the worker guard on, whose beats each go through proxies of their own."""

    def __init__(self, workdir: Path, store_url: str, redis_url: str) -> None:
        super().__init__(workdir, store_url, redis_url, redis_url, SCHEDULES, TTL, guard=True)
        self.paths: dict[int, Paths] = {}
        self.retired: set[CeleryProcess] = set()

    def chaos_beat(self, name: str, fault: str | None = None) -> CeleryProcess:
        assert self.lease_url is not None
        paths = Paths(
            FaultProxy.for_url(self.store_url),
            FaultProxy.for_url(self.lease_url),
            FaultProxy.for_url(self.broker_url),
        )
        beat = self.beat(
            name,
            store_url=paths.store.url(self.store_url),
            lease_url=paths.lease.url(self.lease_url),
            broker=paths.broker.url(self.broker_url),
            fault=fault,
        )
        self.paths[beat.proc.pid] = paths
        return beat

    def proxies(self, beat: CeleryProcess) -> Paths:
        return self.paths[beat.proc.pid]

    def retire(self, beat: CeleryProcess) -> None:
        """Stop a beat the test is done with (it must exit cleanly), and its proxies."""
        assert beat.alive(), f"{beat.name} exited: {beat.tail()}"
        code = beat.stop()
        assert code == 0, f"{beat.name} exited {code}: {beat.tail()}"
        self.retired.add(beat)
        self.paths.pop(beat.proc.pid).close()

    def leading(self) -> tuple[CeleryProcess, int]:
        """The leader, once it has enqueued ticks: it and its epoch."""
        leader = self.wait_leader()
        epoch = wait_until(
            lambda: max((r.epoch for r in self.enqueued()), default=0), 30, "a tick enqueued"
        )
        return leader, epoch

    def wait_takeover(self, epoch: int, timeout: float = TTL + 20) -> Record:
        """The first tick enqueued under an epoch newer than ``epoch``."""
        return wait_until(
            lambda: next((r for r in self.enqueued() if r.epoch > epoch), None),
            timeout,
            f"a standby to take over from epoch {epoch}",
            interval=0.05,
        )

    # -- the invariant ----------------------------------------------------------------------------
    def check(self, healed_ms: int, drain_timeout: float = 40) -> None:
        """Every tick from each schedule's first to the last one every schedule has enqueued
        after ``healed_ms``: enqueued once, executed once, no gap; every beat alive."""
        self.wait_ticks(2, after_ms=healed_ms, timeout=30)
        enqueued = self.enqueued()
        per_name: dict[str, list[int]] = {n: [] for n in self.names}
        for r in enqueued:
            per_name[r.schedule].append(r.tick_ms)
        until = min(max(ticks) for ticks in per_name.values())
        planned = {
            (name, tick)
            for name, ticks in per_name.items()
            for tick in range(min(ticks), until + 1, 1000)
        }
        audited = Counter((r.schedule, r.tick_ms) for r in enqueued)
        twice = {k: n for k, n in audited.items() if n > 1}
        assert not twice, f"ticks enqueued (audited) more than once: {sorted(twice)[:10]}"
        unaudited = sorted(planned - set(audited))
        assert not unaudited, f"gap: {len(unaudited)} ticks never enqueued: {unaudited[:10]}"

        def executed() -> set[tuple[str, int]]:
            return {(r["schedule"], r["tick_ms"]) for r in self.rows("run")}

        try:
            wait_until(lambda: planned <= executed(), drain_timeout, "every planned tick to run")
        except AssertionError as exc:
            missing = sorted(planned - executed())
            raise AssertionError(f"gap: {exc}: {len(missing)} never ran: {missing[:10]}") from None
        runs = Counter((r["schedule"], r["tick_ms"]) for r in self.rows("run"))
        doubles = {k: n for k, n in runs.items() if n > 1}
        assert not doubles, f"executed more than once: {sorted(doubles.items())[:10]}"
        for proc in self.procs:
            if proc not in self.retired:
                assert proc.alive(), f"{proc.name} exited: {proc.tail()}"

    def figures(self, figures: Figures) -> Figures:
        runs = self.rows("run")
        per_tick = Counter((r["schedule"], r["tick_ms"]) for r in runs)
        figures.executions = len(runs)
        figures.duplicates_executed = sum(n - 1 for n in per_tick.values())
        receipts = Counter(r["id"] for r in self.receipts())
        figures.duplicates_published = sum(n - 1 for n in receipts.values())
        lags = sorted(round(r["t"] * 1000) - r["tick_ms"] for r in runs)
        figures.lag_p99_ms = lags[int(0.99 * (len(lags) - 1))] if lags else 0
        return figures

    def close(self) -> None:
        super().close()
        for paths in self.paths.values():
            paths.close()


# -- one trial of each scenario ---------------------------------------------------------------
def _random_instant(rig: ChaosRig, rng: random.Random) -> None:
    """When the fault strikes: half the trials at a random instant, half aimed at a round in
    flight, a random few ms after the whole second when every ``@every 1s`` tick falls due (a
    uniform instant finds the ~50 ms between a round's publish and its audit rarely)."""
    if rng.random() < 0.5:
        time.sleep(rng.uniform(0.0, 1.0))  # a parameter, not a wait
        return
    aim = rng.randint(0, 60)
    wait_until(
        lambda: aim <= rig.store.now_ms() % 1000 <= aim + 15,
        5,
        f"{aim} ms past a whole second",
        interval=0.003,
    )


def _lost_count(beat: CeleryProcess) -> int:
    return len(beat.actions(LOST))


def _hold_until_takeover(
    rig: ChaosRig, rng: random.Random, figures: Figures, epoch: int, fault_at: int
) -> None:
    """Until a standby has taken over (the fault outlasts the TTL), and a random moment more."""
    first = rig.wait_takeover(epoch)
    figures.handover(first.recorded_at_ms - fault_at)
    time.sleep(rng.uniform(0.0, 1.0))  # how much longer the fault lasts: a parameter


def store_hang(rig: ChaosRig, rng: random.Random, figures: Figures) -> int:
    leader, epoch = rig.leading()
    lost = _lost_count(leader)
    _random_instant(rig, rng)
    proxy = rig.proxies(leader).store
    fault_at = rig.store.now_ms()
    if rng.random() < 0.5:  # stretch the rounds first, so the hang most likely lands mid-round
        proxy.slow(rng.uniform(0.05, 0.3))
        time.sleep(rng.uniform(0.3, 1.5))  # a parameter, not a wait
        figures.fault("store_slow_then_hang")
    else:
        figures.fault("store_hang")
    proxy.hang()
    try:
        _hold_until_takeover(rig, rng, figures, epoch, fault_at)
    finally:
        proxy.pass_()
    healed = rig.store.now_ms()
    wait_until(lambda: _lost_count(leader) > lost, 30, "the old leader to stand by")
    return healed


def lease_unreachable(rig: ChaosRig, rng: random.Random, figures: Figures) -> int:
    leader, epoch = rig.leading()
    lost = _lost_count(leader)
    _random_instant(rig, rng)
    proxy = rig.proxies(leader).lease
    kind = rng.choice(["drop", "hang"])
    fault_at = rig.store.now_ms()
    proxy.drop() if kind == "drop" else proxy.hang()
    figures.fault(f"lease_{kind}")
    try:
        _hold_until_takeover(rig, rng, figures, epoch, fault_at)
        wait_until(lambda: _lost_count(leader) > lost, 10, "the old leader to know it lost")
    finally:
        proxy.pass_()
    return rig.store.now_ms()


def broker_hang(rig: ChaosRig, rng: random.Random, figures: Figures) -> int:
    leader, epoch = rig.leading()
    _random_instant(rig, rng)
    proxy = rig.proxies(leader).broker
    long = rng.random() < 0.5
    fault_at = rig.store.now_ms()
    proxy.hang()
    figures.fault("broker_hang_past_ttl" if long else "broker_hang_brief")
    try:
        if long:
            _hold_until_takeover(rig, rng, figures, epoch, fault_at)
        else:
            time.sleep(rng.uniform(0.2, TTL / 2))  # the hang's length: a parameter
    finally:
        proxy.pass_()
    return rig.store.now_ms()


def armed(rng: random.Random) -> str:
    """A beat's fault plan: stop itself after publishing its N-th round as leader (N >= 2, so
    the rounds before it are audited: a takeover from it is seen in the audit)."""
    return f"after_publish:{rng.randint(2, 4)}:stop"


def _gained_epoch(beat: CeleryProcess) -> int:
    """The epoch of the beat's last ``leadership gained (epoch N)``."""
    message = beat.actions(Action.LEADERSHIP_GAINED.value)[-1]["message"]
    return int(message.split("(epoch ", 1)[1].split(")", 1)[0])


def leader_sigstop(rig: ChaosRig, rng: random.Random, figures: Figures) -> int:
    """Every beat is armed, so the standby that takes over may stop itself in turn: the beat of
    this trial is whichever stopped first, told by its output, not by the lease."""

    def stopped() -> CeleryProcess | None:
        live = [b for b in rig.beats if b not in rig.retired]
        return next((b for b in live if STOPPED in b.output()), None)

    beat = wait_until(stopped, 30, "an armed leader to stop itself after publishing")
    fault_at = rig.store.now_ms()
    epoch = _gained_epoch(beat)
    figures.fault("sigstop_after_publish")
    lost = _lost_count(beat)
    try:
        _hold_until_takeover(rig, rng, figures, epoch, fault_at)
    finally:
        beat.signal(signal.SIGCONT)
    healed = rig.store.now_ms()
    wait_until(lambda: _lost_count(beat) > lost, 20, "the woken leader to be fenced out")
    stale = [r for r in rig.records() if r.epoch <= epoch and r.recorded_at_ms >= fault_at]
    assert not stale, f"the stopped leader wrote after waking: {stale}"
    rig.retire(beat)  # its fault plan is spent: a fresh armed beat stands by instead
    rig.chaos_beat(f"{beat.name}-next", fault=armed(rng))
    return healed


Trial = Callable[[ChaosRig, random.Random, Figures], int]
SCENARIOS: dict[str, Trial] = {
    "store_hang": store_hang,
    "lease_unreachable": lease_unreachable,
    "leader_sigstop": leader_sigstop,
    "broker_hang": broker_hang,
}


@pytest.fixture
def chaos_rig(tmp_path: Path, pg_url: str, private_redis: str) -> Iterator[ChaosRig]:
    with rig_factory(tmp_path, ChaosRig) as make:
        yield make(pg_url, private_redis)


def run_scenario(rig: ChaosRig, scenario: str, trials: int, seed: int, tmp_path: Path) -> Figures:
    started = time.monotonic()
    rng = random.Random(f"{seed}:{scenario}")
    figures = Figures(scenario, seed)
    print(f"chaos {scenario}: seed {seed}, {trials} trials")
    rig.worker(ready=False)
    for name in ("beat-a", "beat-b"):
        rig.chaos_beat(name, fault=armed(rng) if scenario == "leader_sigstop" else None)
    for trial in range(1, trials + 1):
        where = f"{scenario} trial {trial}/{trials} (DURABLE_BEAT_CHAOS_SEED={seed} replays it)"
        try:
            healed = SCENARIOS[scenario](rig, rng, figures)
            rig.check(healed)
        except AssertionError as exc:
            raise AssertionError(f"{where}: {exc}") from None
        figures.trials += 1
    rig.figures(figures)
    figures.seconds = round(time.monotonic() - started, 1)
    report = asdict(figures)
    (tmp_path / f"chaos-{scenario}.json").write_text(json.dumps(report, indent=2))
    print(f"chaos figures: {json.dumps(report)}")
    assert figures.duplicates_executed == 0, report
    return figures


@pytest.mark.timeout(180)
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_chaos(chaos_rig: ChaosRig, scenario: str, tmp_path: Path) -> None:
    figures = run_scenario(chaos_rig, scenario, TRIALS, SEED, tmp_path)
    assert figures.trials == TRIALS


@pytest.mark.slow
@pytest.mark.timeout(4 * 3600)
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_chaos_long(chaos_rig: ChaosRig, scenario: str, tmp_path: Path) -> None:
    figures = run_scenario(chaos_rig, scenario, SLOW_TRIALS, SEED, tmp_path)
    assert figures.trials == SLOW_TRIALS
