"""Real `celery beat -S celery_durable_beat.Scheduler` and `celery worker` processes on
PostgreSQL and a Redis broker: what a user runs, end to end."""

from __future__ import annotations

import json
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.schedules.render import tick_isoformat
from celery_durable_beat.store.sql import SqlStore
from tests.support.procs import REPO, CeleryProcess, read_jsonl, wait_until

pytestmark = pytest.mark.integration


class Rig:
    """A workdir with the test app, a worker and beats started on demand."""

    def __init__(self, tmp: Path, pg_url: str, redis_url: str, schedule: dict[str, Any]) -> None:
        self.tmp = tmp
        shutil.copy(REPO / "tests" / "support" / "beatapp.py", tmp / "beatapp.py")
        self.ticks_file = tmp / "ticks.jsonl"
        self.pg_url = pg_url
        self.env = {
            "BEAT_BROKER": redis_url,
            "DURABLE_BEAT_URL": pg_url,
            "BEAT_SCHEDULE": json.dumps(schedule),
            "TICKS_FILE": str(self.ticks_file),
        }
        self.procs: list[CeleryProcess] = []

    def worker(self) -> CeleryProcess:
        return self._start(
            [
                "worker",
                "-P",
                "solo",
                "-l",
                "info",
                "--without-mingle",
                "--without-gossip",
                "--without-heartbeat",
            ],
            "worker",
        )

    def beat(self, name: str = "beat") -> CeleryProcess:
        return self._start(
            ["beat", "-S", "celery_durable_beat.Scheduler", "-l", "info", "--pidfile="], name
        )

    def _start(self, args: list[str], name: str) -> CeleryProcess:
        proc = CeleryProcess(self.tmp, "beatapp", args, self.env, f"{name}-{len(self.procs)}")
        self.procs.append(proc)
        return proc

    def ticks(self) -> list[dict[str, Any]]:
        return read_jsonl(self.ticks_file)

    def close(self) -> None:
        for proc in self.procs:
            proc.close()


@pytest.fixture
def rig_factory(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[Any]:
    rigs: list[Rig] = []

    def make(schedule: dict[str, Any]) -> Rig:
        rig = Rig(tmp_path, pg_url, redis_url, schedule)
        rigs.append(rig)
        return rig

    yield make
    for rig in rigs:
        rig.close()


def test_ticks_execute_with_ids_headers_and_placeholders(rig_factory: Any) -> None:
    rig = rig_factory(
        {
            "every-second": {
                "task": "beatapp.record",
                "schedule": "@every 1s",
                "kwargs": {"at": "{{scheduled_for}}", "ms": "{{scheduled_for_ms}}"},
            }
        }
    )
    rig.worker()
    rig.beat()
    rows = wait_until(lambda: len(rig.ticks()) >= 3 and rig.ticks(), 45, "3 executed ticks")
    for row in rows:
        tick_ms = row["headers"]["periodic_tick_ms"]
        assert row["id"] == tick_task_id("every-second", tick_ms)
        assert row["headers"]["periodic_schedule"] == "every-second"
        assert row["headers"]["periodic_trigger"] == "auto"
        assert row["kwargs"] == {"at": tick_isoformat(tick_ms, "UTC"), "ms": str(tick_ms)}


def _executed(rig: Rig) -> list[int]:
    return [r["headers"]["periodic_tick_ms"] for r in rig.ticks()]


def test_restart_continues_with_no_gap_and_no_duplicate(rig_factory: Any) -> None:
    rig = rig_factory(
        {
            "s": {
                "task": "beatapp.record",
                "schedule": "@every 1s",
                "missed": "backfill",
                "backfill_max": 30,
            }
        }
    )
    rig.worker()
    first = rig.beat("beat-a")
    wait_until(lambda: len(rig.ticks()) >= 3, 45, "3 ticks before the restart")
    assert first.stop() == 0, first.output()[-2000:]
    seen = len(rig.ticks())
    second = rig.beat("beat-b")
    wait_until(lambda: len(rig.ticks()) >= seen + 4, 45, "4 more ticks after the restart")
    second.stop()
    ticks = _executed(rig)
    assert len(ticks) == len(set(ticks)), "a tick executed twice"
    ordered = sorted(ticks)
    assert ordered == list(range(ordered[0], ordered[-1] + 1, 1000)), "a tick is missing"


def test_skip_policy_after_kill_9_records_the_dropped_ticks(rig_factory: Any) -> None:
    rig = rig_factory({"s": {"task": "beatapp.record", "schedule": "@every 1s", "missed": "skip"}})
    rig.env["BEAT_INSTALL"] = "1"  # a kill between publish and audit may publish a tick twice
    rig.env["BEAT_LEASE_TTL"] = "3"  # the killed beat's lease must lapse before the next leads
    rig.worker()
    beat = rig.beat("beat-a")
    wait_until(lambda: len(rig.ticks()) >= 2, 45, "2 ticks")
    beat.signal(signal.SIGKILL)
    beat.proc.wait(timeout=10)
    store = SqlStore(rig.pg_url)
    try:
        stopped_at = store.now_ms()
        wait_until(lambda: store.now_ms() - stopped_at > 4000, 10, "4 s of downtime")
        seen = len(rig.ticks())
        rig.beat("beat-b")
        wait_until(lambda: len(rig.ticks()) >= seen + 2, 45, "ticks after the restart")
        skipped = wait_until(
            lambda: [e for e in store.history("s", 50) if e.reason == "missed"],
            20,
            "a skipped/missed record",
        )
    finally:
        store.close()
    assert skipped[0].detail["count"] >= 3
    ticks = _executed(rig)
    assert len(ticks) == len(set(ticks))


def test_invalid_config_exits_non_zero_listing_every_error(rig_factory: Any) -> None:
    rig = rig_factory(
        {
            "nightly": {"task": "beatapp.record", "schedule": "0 3 * * *", "tz": "Bogota"},
            "broken": {"task": "beatapp.record", "schedule": "61 * * * *", "missed": "sometimes"},
        }
    )
    beat = rig.beat()
    code = beat.proc.wait(timeout=60)
    out = beat.output()
    assert code != 0
    assert 'tz "Bogota" is not an IANA zone; use e.g. "America/Bogota"' in out
    assert 'schedule "broken"' in out and "missed" in out and "not a valid cron" in out


def test_run_once_policy_after_kill_9_fires_the_earliest_missed_tick(rig_factory: Any) -> None:
    rig = rig_factory(
        {"s": {"task": "beatapp.record", "schedule": "@every 1s", "missed": "run_once"}}
    )
    rig.env["BEAT_INSTALL"] = "1"
    rig.env["BEAT_LEASE_TTL"] = "3"
    rig.worker()
    beat = rig.beat("beat-a")
    wait_until(lambda: len(rig.ticks()) >= 2, 45, "2 ticks")
    beat.signal(signal.SIGKILL)
    beat.proc.wait(timeout=10)
    store = SqlStore(rig.pg_url)
    try:
        stopped_at = store.now_ms()
        wait_until(lambda: store.now_ms() - stopped_at > 4000, 10, "4 s of downtime")
        last_before = max(_executed(rig))
        rig.beat("beat-b")
        wait_until(
            lambda: len([t for t in _executed(rig) if t > stopped_at + 4000]) >= 1,
            45,
            "a tick planned after the restart",
        )
        dropped = wait_until(
            lambda: [e for e in store.history("s", 50) if e.reason == "missed"],
            20,
            "a skipped/missed record",
        )
    finally:
        store.close()
    after = sorted(t for t in _executed(rig) if t > last_before)
    assert after[0] == last_before + 1000, "run_once fires the earliest missed tick"
    assert after[1] - after[0] >= 3000, "the rest of the outage was dropped, not fired"
    assert dropped[0].detail["count"] == (after[1] - after[0]) // 1000 - 1
