"""The chaos proofs' rig (issue #15): beats behind fault proxies of their own, and the invariant.

``tests/reliability/test_chaos.py`` (faults between the processes and their servers) and
``tests/reliability/test_chaos_restarts.py`` (servers restarted mid-burst) both run on it: real
``celery beat`` processes and a ``celery worker`` with ``install(app)`` (the guard), the evidence
read from the audit table and the worker's own record of what it executed.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from celery_durable_beat.model import Action
from tests.reliability.conftest import HaRig, Record, every_second
from tests.support.faultproxy import FaultProxy
from tests.support.procs import CeleryProcess, wait_until
from tests.support.rig import app_env

TTL = 2.0
SCHEDULES = every_second(*(f"chaos-{i}" for i in range(5)))
LOST = Action.LEADERSHIP_LOST.value
GAINED = Action.LEADERSHIP_GAINED.value


@dataclass
class Figures:
    """What one scenario's run did and saw."""

    scenario: str
    seed: int
    lease: str = "redis"
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
    started: float = field(default_factory=time.monotonic, repr=False)

    def fault(self, kind: str) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + 1

    def handover(self, ms: int) -> None:
        self.takeovers += 1
        self.max_handover_ms = max(self.max_handover_ms, ms)

    def report(self, tmp_path: Path) -> dict[str, Any]:
        """The figures as printed and written to ``chaos-<scenario>-<lease>.json``."""
        self.seconds = round(time.monotonic() - self.started, 1)
        report = {k: v for k, v in asdict(self).items() if k != "started"}
        path = tmp_path / f"chaos-{self.scenario}-{self.lease}.json"
        path.write_text(json.dumps(report, indent=2))
        print(f"chaos figures: {json.dumps(report)}")
        return report


@dataclass
class Paths:
    """One beat's proxies: to the store, the lease (none for the store lease) and the broker."""

    store: FaultProxy
    lease: FaultProxy | None
    broker: FaultProxy

    def close(self) -> None:
        for proxy in (self.store, self.lease, self.broker):
            if proxy is not None:
                proxy.close()


class ChaosRig(HaRig):
    """A HaRig with the worker guard on, whose beats each go through proxies of their own.

    ``lease_url`` None elects with the store lease (the lease row in PostgreSQL, and the guard's
    claims in the store too); a Redis URL puts both there."""

    def __init__(
        self,
        workdir: Path,
        store_url: str,
        broker_url: str,
        lease_url: str | None,
        schedule: dict[str, Any] | None = None,
        **settings: object,
    ) -> None:
        schedule = SCHEDULES if schedule is None else schedule
        super().__init__(workdir, store_url, broker_url, lease_url, schedule, TTL, guard=True)
        self.env.update(app_env(settings))
        self.paths: dict[int, Paths] = {}
        self.retired: set[CeleryProcess] = set()

    def chaos_beat(self, name: str, fault: str | None = None) -> CeleryProcess:
        lease = None if self.lease_url is None else FaultProxy.for_url(self.lease_url)
        store, broker = FaultProxy.for_url(self.store_url), FaultProxy.for_url(self.broker_url)
        paths = Paths(store, lease, broker)
        beat = self.beat(
            name,
            store_url=paths.store.url(self.store_url),
            lease_url=None if lease is None else lease.url(str(self.lease_url)),
            broker=paths.broker.url(self.broker_url),
            fault=fault,
        )
        self.paths[beat.proc.pid] = paths
        return beat

    def proxies(self, beat: CeleryProcess) -> Paths:
        return self.paths[beat.proc.pid]

    def live_beats(self) -> list[CeleryProcess]:
        return [b for b in self.beats if b not in self.retired]

    def retire(self, beat: CeleryProcess, *, kill: bool = False) -> None:
        """Take a beat out of the run, and its proxies: stopped (it must exit cleanly), or
        killed (SIGKILL: the fault of a scenario, not a beat that exited by itself)."""
        assert beat.alive(), f"{beat.name} exited: {beat.tail()}"
        if kill:
            beat.kill()
        else:
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

    def gained(self) -> list[tuple[int, str]]:
        """Every ``leadership gained (epoch N)`` any beat logged: (N, the beat's name)."""
        return [
            (int(row["message"].split("(epoch ", 1)[1].split(")", 1)[0]), beat.name)
            for beat in self.beats
            for row in beat.actions(GAINED)
        ]

    # -- the invariant ----------------------------------------------------------------------------
    def check(self, healed_ms: int, drain_timeout: float = 40, ticks_timeout: float = 30) -> None:
        """Every tick from each schedule's first to the last one every schedule has enqueued
        after ``healed_ms``: enqueued once, executed once, no gap; one beat per epoch; every beat
        alive."""
        self.wait_ticks(2, after_ms=healed_ms, timeout=ticks_timeout)
        planned = self._planned_once()
        self._executed_once(planned, drain_timeout)
        epochs = Counter(epoch for epoch, _ in self.gained())
        shared = sorted(e for e, n in epochs.items() if n > 1)
        assert not shared, f"two beats gained the same epoch: {shared}: {sorted(self.gained())}"
        for proc in self.procs:
            if proc not in self.retired:
                assert proc.alive(), f"{proc.name} exited: {proc.tail()}"

    def _planned_once(self) -> set[tuple[str, int]]:
        """The ticks every schedule should have had; each audited ``enqueued`` exactly once."""
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
        return planned

    def _executed_once(self, planned: set[tuple[str, int]], drain_timeout: float) -> None:
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

    def figures(self, figures: Figures, lag_since_ms: int = 0) -> Figures:
        """Add this rig's executions, duplicates and lags (of the ticks planned from
        ``lag_since_ms`` on: a backfilled burst is late by design) to ``figures``."""
        runs = self.rows("run")
        per_tick = Counter((r["schedule"], r["tick_ms"]) for r in runs)
        figures.executions += len(runs)
        figures.duplicates_executed += sum(n - 1 for n in per_tick.values())
        receipts = Counter(r["id"] for r in self.receipts())
        figures.duplicates_published += sum(n - 1 for n in receipts.values())
        lags = sorted(
            round(r["t"] * 1000) - r["tick_ms"] for r in runs if r["tick_ms"] >= lag_since_ms
        )
        p99 = lags[int(0.99 * (len(lags) - 1))] if lags else 0
        figures.lag_p99_ms = max(figures.lag_p99_ms, p99)
        return figures

    def close(self) -> None:
        super().close()
        for paths in self.paths.values():
            paths.close()
