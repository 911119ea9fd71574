"""Chaos proofs (issue #15): faults at random instants between real processes and their servers.

Two real ``celery beat`` processes (three in ``standby_race``) and a ``celery worker`` with
``install(app)`` (the guard) on PostgreSQL (the store) and a Redis of the test's own (the broker,
and with the Redis lease the lease and the guard's claims). Each beat reaches its servers through
proxies of its own (``tests/support/faultproxy.py``), so a fault can hit the leader alone while
its standby sees healthy servers; the worker connects directly. Schedules are ``@every 1s`` with
``missed: backfill``, the lease TTL is 2 s. The rig and the invariant: ``chaos_rig.py``.

Scenarios, each a series of trials at random instants drawn from a printed seed
(``tests/support/chaos.py``), on the lease(s) in brackets (``redis``: the lease and the guard's
claims in Redis; ``store``: ``durable_beat_lease_url`` unset, the lease row and the claims in
PostgreSQL):

- ``store_hang`` [redis, store]: the leader's PostgreSQL connections hang (nothing forwarded
  either way) until a standby has taken over, i.e. longer than the TTL, then heal, the held bytes
  delivered late; in half the trials they are slowed first (each statement late by 50-300 ms),
  which stretches the round so that the hang most likely strikes in its middle. On the store
  lease the leader's renewals hang with its rounds;
- ``lease_unreachable`` [redis]: the leader's Redis lease is dropped (connections reset, new ones
  refused) or hangs, the store stays fine, until a standby has taken over (on the store lease
  this is ``store_hang``);
- ``leader_sigstop`` [redis, store]: the leader stops itself (SIGSTOP, the fault plan
  ``after_publish:N:stop`` its process arms with ``faults.arm``: every publish of the round
  confirmed, its audit not written) and stays stopped while a standby takes over, and is
  continued: it is fenced out, writes nothing, and stands by (then it is replaced by a fresh
  beat armed the same way, for the next trial);
- ``broker_hang`` [redis]: the leader's broker connections hang in the middle of publishing,
  either briefly (less than the TTL) or until a standby has taken over;
- ``standby_race`` [redis, store]: three beats; the leader is killed (SIGKILL) or stopped
  (SIGSTOP) at a random instant, so two standbys race for the expiring lease; exactly one wins
  each epoch. A stopped leader is continued once the winner leads and must stand by; a killed
  one is replaced by a fresh beat for the next trial.

After each trial, for every schedule, from its first tick to the last tick every schedule has
been enqueued after the heal: every tick enqueued (audit) exactly once and executed (the worker's
ticks file) exactly once, no gap, no epoch gained by two beats, and every beat process still alive
(but those the scenario killed). Duplicates the faults made beats publish are counted (the
worker's receipts), never executed (the guard refuses them).

``DURABLE_BEAT_CHAOS_SEED`` replays a run; ``DURABLE_BEAT_CHAOS_TRIALS`` sets the short version's
trials (2 per scenario on the Redis lease, half that on the store lease), ``-m slow`` runs
``DURABLE_BEAT_CHAOS_SLOW_TRIALS`` (25) and prints the figures (also in
``chaos-<scenario>-<lease>.json`` in the test's temporary folder).
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.chaos_rig import GAINED, LOST, TTL, ChaosRig, Figures
from tests.support.chaos import SEED, SLOW_TRIALS, TRIALS
from tests.support.procs import CeleryProcess, wait_until
from tests.support.rig import rig_factory

pytestmark = [pytest.mark.reliability, pytest.mark.chaos]

STOPPED = "durable-beat fault stopped at after_publish"


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
    message = beat.actions(GAINED)[-1]["message"]
    return int(message.split("(epoch ", 1)[1].split(")", 1)[0])


def leader_sigstop(rig: ChaosRig, rng: random.Random, figures: Figures) -> int:
    """Every beat is armed, so the standby that takes over may stop itself in turn: the beat of
    this trial is whichever stopped first, told by its output, not by the lease."""

    def stopped() -> CeleryProcess | None:
        return next((b for b in rig.live_beats() if STOPPED in b.output()), None)

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


def standby_race(rig: ChaosRig, rng: random.Random, figures: Figures) -> int:
    """The leader dies (SIGKILL) or freezes (SIGSTOP) at a random instant; both standbys try for
    the lease on every round, so they race on its expiry, and one of them must win alone."""
    leader, epoch = rig.leading()
    _random_instant(rig, rng)
    kind = rng.choice(["kill", "stop"])
    fault_at = rig.store.now_ms()
    figures.fault(f"leader_{kind}")
    if kind == "kill":
        rig.retire(leader, kill=True)
        _hold_until_takeover(rig, rng, figures, epoch, fault_at)
        rig.chaos_beat(f"{leader.name}-next")  # three beats again for the next trial
        return rig.store.now_ms()
    lost = _lost_count(leader)
    leader.signal(signal.SIGSTOP)
    try:
        _hold_until_takeover(rig, rng, figures, epoch, fault_at)
    finally:
        leader.signal(signal.SIGCONT)
    healed = rig.store.now_ms()
    wait_until(lambda: _lost_count(leader) > lost, 20, "the woken leader to stand by")
    return healed


Trial = Callable[[ChaosRig, random.Random, Figures], int]
SCENARIOS: dict[str, Trial] = {
    "store_hang": store_hang,
    "lease_unreachable": lease_unreachable,
    "leader_sigstop": leader_sigstop,
    "broker_hang": broker_hang,
    "standby_race": standby_race,
}
CASES = [
    ("store_hang", "redis"),
    ("store_hang", "store"),
    ("lease_unreachable", "redis"),
    ("leader_sigstop", "redis"),
    ("leader_sigstop", "store"),
    ("broker_hang", "redis"),
    ("standby_race", "redis"),
    ("standby_race", "store"),
]
"""(scenario, lease): the store lease only where it differs from the Redis one."""


@pytest.fixture
def make_chaos_rig(tmp_path: Path, pg_url: str, private_redis: str) -> Iterator[Any]:
    """``make(lease)``: a ChaosRig on the store and a Redis of its own, electing with it."""
    with rig_factory(tmp_path, ChaosRig) as make:
        yield lambda lease: make(pg_url, private_redis, private_redis if lease == "redis" else None)


def _beats(scenario: str) -> int:
    return 3 if scenario == "standby_race" else 2


def run_scenario(
    rig: ChaosRig, scenario: str, lease: str, trials: int, seed: int, tmp_path: Path
) -> Figures:
    rng = random.Random(f"{seed}:{scenario}:{lease}")
    figures = Figures(scenario, seed, lease)
    print(f"chaos {scenario} [{lease} lease]: seed {seed}, {trials} trials")
    rig.worker(ready=False)
    for name in ("beat-a", "beat-b", "beat-c")[: _beats(scenario)]:
        rig.chaos_beat(name, fault=armed(rng) if scenario == "leader_sigstop" else None)
    for trial in range(1, trials + 1):
        where = f"{scenario} [{lease}] trial {trial}/{trials} (DURABLE_BEAT_CHAOS_SEED={seed})"
        try:
            healed = SCENARIOS[scenario](rig, rng, figures)
            rig.check(healed)
        except AssertionError as exc:
            raise AssertionError(f"{where}: {exc}") from None
        figures.trials += 1
    report = rig.figures(figures).report(tmp_path)
    assert figures.duplicates_executed == 0, report
    return figures


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("scenario", "lease"), CASES)
def test_chaos(make_chaos_rig: Any, scenario: str, lease: str, tmp_path: Path) -> None:
    # The store-lease variants repeat a scenario on the other lease: half the trials in the
    # short run keeps the suite's minutes; ``-m slow`` runs them in full.
    trials = TRIALS if lease == "redis" else max(1, TRIALS // 2)
    figures = run_scenario(make_chaos_rig(lease), scenario, lease, trials, SEED, tmp_path)
    assert figures.trials == trials


@pytest.mark.slow
@pytest.mark.timeout(4 * 3600)
@pytest.mark.parametrize(("scenario", "lease"), CASES)
def test_chaos_long(make_chaos_rig: Any, scenario: str, lease: str, tmp_path: Path) -> None:
    figures = run_scenario(make_chaos_rig(lease), scenario, lease, SLOW_TRIALS, SEED, tmp_path)
    assert figures.trials == SLOW_TRIALS
