"""Leadership with real processes (SPEC §7): three beats, SIGTERM handover, kill -9 takeover,
a SIGSTOPped leader fenced out when it wakes. Each test runs on the store lease and on Redis.

Signals are sent mid-second, when no ``@every 1s`` round is in flight, so the broker-side
expectations (each tick executed exactly once) hold without the worker-side dedup guard: what is
tested is the lease, the epoch and the round order, not the luck of where a signal lands.
"""

from __future__ import annotations

import signal
from typing import Any

import pytest

from tests.reliability.conftest import HaRig, Record, every_second
from tests.support.procs import wait_until

pytestmark = pytest.mark.reliability


@pytest.fixture
def rig_for(make_rig: Any, pg_url: str, private_redis: str, lease_backend: str) -> Any:
    """A rig on the machine's PostgreSQL (the store) and a Redis of its own (the broker, and the
    lease when asked): test runs sharing the machine's Redis would consume each other's ticks."""

    def make(schedule: dict[str, Any], ttl: float = 30.0) -> HaRig:
        lease_url = private_redis if lease_backend == "redis" else None
        return make_rig(pg_url, private_redis, lease_url, schedule, ttl)

    return make


def _first_with_newer_epoch(rig: HaRig, epoch: int, timeout: float) -> Record:
    return wait_until(
        lambda: next((r for r in rig.enqueued() if r.epoch > epoch), None),
        timeout,
        f"a tick enqueued under an epoch newer than {epoch}",
        interval=0.05,
    )


def test_three_beats_dispatch_every_tick_exactly_once(rig_for: Any) -> None:
    rig = rig_for(every_second("alpha", "beta", "gamma"))
    rig.worker(ready=False)
    beats = [rig.beat(f"beat-{i}") for i in range(3)]
    rig.wait_leader()
    first = min(r.tick_ms for r in rig.wait_ticks(1))
    rig.wait_ticks(30, after_ms=first - 1, timeout=60)  # 30 s of three schedules
    rig.assert_all_alive()
    rig.stop_beats()
    enqueued = rig.assert_exactly_once()
    assert len(enqueued) >= 90
    assert len({r.epoch for r in enqueued}) == 1, "leadership changed hands without a failure"
    logs = [beat.output() for beat in beats]
    assert sum("leadership gained" in log for log in logs) == 1
    assert sum("standing by: " in log and " leads (epoch " in log for log in logs) == 2
    assert not any("leadership lost" in log for log in logs)
    assert not any("Traceback" in log for log in logs)


@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"]
)
def test_sigterm_hands_over_to_a_standby_within_2s(rig_for: Any, sig: signal.Signals) -> None:
    """SIGINT and SIGHUP too (SPEC §14): Python's default for SIGHUP ends the process without
    releasing the lease, so a restart would wait out the TTL."""
    # A 30 s TTL: only the release on the signal can explain a handover this fast.
    rig = rig_for(every_second("s"))
    old, old_epoch = rig.start_leader_and_standby()
    sigterm_at = rig.wait_mid_second()
    old.signal(sig)
    assert old.wait_exit(20) == 0, old.output()[-3000:]
    first_new = _first_with_newer_epoch(rig, old_epoch, 10)
    assert first_new.tick_ms == (sigterm_at // 1000 + 1) * 1000, "not the next tick"
    assert first_new.recorded_at_ms - sigterm_at < 2000
    assert "leadership released" in old.output()
    rig.wait_ticks(2, after_ms=first_new.tick_ms)
    rig.stop_beats()
    rig.assert_exactly_once()


def test_kill_9_takeover_within_ttl_plus_1s_and_the_outage_is_backfilled(rig_for: Any) -> None:
    ttl = 5.0
    rig = rig_for(every_second("s"), ttl=ttl)
    old, old_epoch = rig.start_leader_and_standby()
    killed_at = rig.wait_mid_second()
    old.kill()
    first_new = _first_with_newer_epoch(rig, old_epoch, ttl + 10)
    takeover_ms = first_new.recorded_at_ms - killed_at
    assert takeover_ms <= (ttl + 1) * 1000, f"took over after {takeover_ms} ms"
    rig.wait_ticks(2, after_ms=first_new.recorded_at_ms)
    rig.stop_beats()
    enqueued = rig.assert_exactly_once()
    # The ticks of the outage fired late, by the new leader, as `missed: backfill` says.
    outage = [r for r in enqueued if killed_at < r.tick_ms < first_new.recorded_at_ms - 1000]
    assert len(outage) >= ttl - 2
    assert all(r.epoch > old_epoch for r in outage)
    assert all(r.recorded_at_ms - r.tick_ms > 500 for r in outage), "outage ticks were not late"


def test_a_stopped_leader_that_wakes_up_is_fenced_out_and_stands_by(rig_for: Any) -> None:
    ttl = 3.0
    rig = rig_for(every_second("s"), ttl=ttl)
    old, old_epoch = rig.start_leader_and_standby()
    stopped_at = rig.wait_mid_second()
    old.signal(signal.SIGSTOP)
    try:
        first_new = _first_with_newer_epoch(rig, old_epoch, ttl + 10)
        rig.wait_ticks(2, after_ms=first_new.recorded_at_ms)  # the new leader, on time
    finally:
        old.signal(signal.SIGCONT)
    woke_at = rig.store.now_ms()
    old.wait_for("leadership lost", 10)  # the old leader noticed
    rig.wait_ticks(3, after_ms=woke_at)
    assert old.proc.poll() is None, "the old leader exited instead of standing by"
    assert old.output().count("leadership lost") == 1
    new_epoch = max(r.epoch for r in rig.enqueued())
    stale = [r for r in rig.records() if r.epoch <= old_epoch and r.recorded_at_ms > stopped_at]
    assert stale == [], f"the old leader wrote after it was stopped: {stale}"
    assert rig.schedule_epochs() == {new_epoch}, "a schedule advanced under an old epoch"
    rig.stop_beats()
    rig.assert_exactly_once()
