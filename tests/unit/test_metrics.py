"""Metrics (SPEC §10) on the in-memory backends: what the rounds count, time and report.

A real ``BeatLoop`` (memory store and lease, capturing publisher, a manual clock) observed by
``BeatMetrics`` on a registry of the test's own; values read back with ``get_sample_value``.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import pytest
from prometheus_client import REGISTRY, CollectorRegistry

from celery_durable_beat.beat_loop import NO_OBSERVER, BeatLoop
from celery_durable_beat.dispatch import Dispatcher, RoundStats
from celery_durable_beat.exceptions import ConfigError
from celery_durable_beat.leadership import Leadership
from celery_durable_beat.metrics import (
    METRIC_NAMES,
    BeatMetrics,
    SpecRegistry,
    StatusCollector,
    status_registry,
)
from celery_durable_beat.model import Action, Reason, ScheduleState
from celery_durable_beat.publish.capturing import CapturingPublisher
from celery_durable_beat.schedules.validate import validate_entries
from celery_durable_beat.settings import Settings
from celery_durable_beat.testing import MemoryLease, MemoryStore
from celery_durable_beat.wiring import make_observer

pytestmark = pytest.mark.unit

T0 = 1_780_000_000_000  # a whole second, 2026-05-28
ENTRIES = {
    "often": {"task": "proj.often", "schedule": "@every 10s"},
    "daily": {"task": "proj.daily", "schedule": "0 3 * * *"},
}


class ManualClock:
    def __init__(self) -> None:
        self.ms = T0
        self.mono = 100.0

    def now_ms(self) -> int:
        return self.ms

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.ms += round(seconds * 1000)
        self.mono += seconds


class CountingStore(MemoryStore):
    """Counts the reads of the schedules by state (they must not follow the rounds)."""

    counts_reads = 0

    def counts_by_state(self) -> dict[str, int]:
        self.counts_reads += 1
        return super().counts_by_state()


class Beat:
    """One beat process's loop and metrics, on a shared store."""

    def __init__(
        self, store: MemoryStore, clock: ManualClock, holder: str, publisher: Any = None
    ) -> None:
        self.registry = CollectorRegistry()
        self.metrics = BeatMetrics(self.registry, store=store, clock=clock, store_every=10)
        self.publisher = publisher or CapturingPublisher()
        leadership = Leadership(
            MemoryLease(store, 30, holder=holder), store, clock, poll_interval=1.0
        )
        self.loop = BeatLoop(
            store,
            Dispatcher(store, self.publisher, still_leader=leadership.still_leader),
            leadership,
            definitions=validate_entries(ENTRIES),
            history_keep=10,
            observer=self.metrics,
        )

    def value(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, labels)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store(clock: ManualClock) -> CountingStore:
    return CountingStore(clock=clock.now_ms)


@pytest.fixture
def beat(store: CountingStore, clock: ManualClock) -> Beat:
    b = Beat(store, clock, "beat-a")
    b.loop.prepare()
    return b


def test_an_idle_leader_round_reports_leadership_counts_and_its_time(
    beat: Beat, clock: ManualClock
) -> None:
    beat.loop.round()
    assert beat.value("durable_beat_leader") == 1
    assert beat.value("durable_beat_fencing_epoch") == beat.loop.leadership.epoch >= 1
    assert beat.value("durable_beat_schedules", state="active") == 2
    for state in ("paused", "archived", "quarantined"):
        assert beat.value("durable_beat_schedules", state=state) == 0
    assert beat.value("durable_beat_due_backlog") == 0
    assert beat.value("durable_beat_round_seconds_count") == 1
    assert beat.value("durable_beat_last_round_timestamp_seconds") == T0 / 1000
    assert beat.value("durable_beat_dispatch_lag_seconds_count") == 0


def test_ticks_are_counted_by_outcome_reason_and_trigger_with_their_lag(
    beat: Beat, clock: ManualClock
) -> None:
    beat.loop.round()
    clock.advance(10.25)  # the first tick of "often" is 250 ms late
    beat.loop.round()
    enqueued = {"outcome": "enqueued", "reason": "", "trigger": "auto"}
    assert beat.value("durable_beat_ticks_total", **enqueued) == 1
    assert beat.value("durable_beat_dispatch_lag_seconds_count") == 1
    assert beat.value("durable_beat_dispatch_lag_seconds_sum") == pytest.approx(0.25)
    assert beat.value("durable_beat_last_round_timestamp_seconds") == clock.ms / 1000

    clock.advance(40)  # four ticks due at once: skip fires the latest, drops three in one record
    beat.loop.round()
    assert beat.value("durable_beat_ticks_total", **enqueued) == 2
    missed = {"outcome": "skipped", "reason": "missed", "trigger": "auto"}
    assert beat.value("durable_beat_ticks_total", **missed) == 3
    assert beat.value("durable_beat_dispatch_lag_seconds_count") == 2


def test_a_broker_outage_counts_failed_ticks_with_their_reason(
    beat: Beat, clock: ManualClock
) -> None:
    beat.loop.round()
    beat.publisher.fail_with = Reason.BROKER_UNAVAILABLE
    clock.advance(10)
    beat.loop.round()
    failed = {"outcome": "failed", "reason": "broker_unavailable", "trigger": "auto"}
    assert beat.value("durable_beat_ticks_total", **failed) == 1
    assert beat.value("durable_beat_dispatch_lag_seconds_count") == 0


def test_no_label_carries_a_schedule_name(beat: Beat, clock: ManualClock) -> None:
    for _ in range(5):
        beat.loop.round()
        clock.advance(10)
    samples = [s for family in beat.registry.collect() for s in family.samples]
    values = {v for s in samples for k, v in s.labels.items() if k != "le"}
    assert values and not values & {*ENTRIES, "proj.often", "proj.daily"}


def test_the_names_and_label_sets_are_exactly_the_specs(beat: Beat) -> None:
    beat.loop.round()
    families = {f.name: f for f in beat.registry.collect()}
    # prometheus_client names a counter's family without its _total suffix
    exposed = {f.name + ("_total" if f.type == "counter" else "") for f in families.values()}
    assert exposed == set(METRIC_NAMES)
    labels = {
        name: {frozenset(k for k in s.labels if k != "le") for s in f.samples}
        for name, f in families.items()
    }
    assert labels["durable_beat_schedules"] == {frozenset({"state"})}
    assert labels["durable_beat_leader"] == {frozenset()}
    assert labels["durable_beat_round_seconds"] == {frozenset()}
    assert families["durable_beat_dispatch_lag_seconds"].type == "histogram"
    assert families["durable_beat_last_round_timestamp_seconds"].type == "gauge"


def test_a_standby_reports_leader_0_and_the_leaders_epoch(
    beat: Beat, store: CountingStore, clock: ManualClock
) -> None:
    beat.loop.round()
    standby = Beat(store, clock, "beat-b")
    standby.loop.prepare()
    standby.loop.round()
    assert standby.value("durable_beat_leader") == 0
    assert standby.value("durable_beat_fencing_epoch") == beat.loop.leadership.epoch
    assert standby.value("durable_beat_round_seconds_count") == 0
    assert standby.value("durable_beat_last_round_timestamp_seconds") == 0
    assert standby.value("durable_beat_schedules", state="active") == 2


def test_the_store_is_read_for_counts_every_few_seconds_not_every_round(
    beat: Beat, store: CountingStore, clock: ManualClock
) -> None:
    for _ in range(20):
        beat.loop.round()
        clock.advance(0.2)  # 20 rounds in 4 s
    assert store.counts_reads == 1
    store.set_state("daily", ScheduleState.PAUSED, clock.ms)
    clock.advance(10)
    beat.loop.round()
    assert store.counts_reads == 2
    assert beat.value("durable_beat_schedules", state="paused") == 1


def test_the_backlog_counts_schedules_due_now(
    beat: Beat, store: CountingStore, clock: ManualClock
) -> None:
    beat.loop.round()
    clock.advance(10)
    beat.metrics.store_every = 0  # read on every round from here on
    beat.metrics.standing(True, 1)  # as if between rounds, now that "often" is due
    assert beat.value("durable_beat_due_backlog") == 1
    beat.loop.round()
    assert beat.value("durable_beat_due_backlog") == 0


def test_a_failing_observer_never_stops_a_round(
    beat: Beat, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*_: object) -> None:
        raise RuntimeError("the metrics are broken")

    beat.metrics.standing = broken  # type: ignore[method-assign]
    beat.metrics.round_done = broken  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING):
        assert beat.loop.round() >= 0
    actions = [getattr(r, "action", None) for r in caplog.records]
    assert actions.count(Action.METRICS_FAILED.value) == 2


def test_metrics_never_touch_the_global_registry(beat: Beat) -> None:
    beat.loop.round()
    assert all(REGISTRY.get_sample_value(name) is None for name in METRIC_NAMES)


def test_round_done_without_records_only_times_the_round(beat: Beat) -> None:
    beat.metrics.round_done(RoundStats(), 0.5)
    assert beat.value("durable_beat_round_seconds_sum") == 0.5


# -- wiring: off by default, and a clear refusal without the client ---------------------------
def _block_prometheus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import raises ImportError
    monkeypatch.delitem(sys.modules, "celery_durable_beat.metrics")


def test_without_a_port_there_are_no_metrics_and_no_client_import(
    monkeypatch: pytest.MonkeyPatch, store: CountingStore, clock: ManualClock
) -> None:
    _block_prometheus(monkeypatch)
    assert make_observer(Settings(), store, clock) is NO_OBSERVER


def test_a_port_without_prometheus_client_is_one_line_naming_the_setting_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, store: CountingStore, clock: ManualClock
) -> None:
    _block_prometheus(monkeypatch)
    with pytest.raises(ConfigError) as caught:
        make_observer(Settings(metrics_port=9808), store, clock)
    (problem,) = caught.value.problems
    assert str(problem) == (
        "setting durable_beat_metrics_port = 9808: serving metrics needs prometheus-client: "
        "pip install 'celery_durable_beat[metrics]'"
    )


def test_a_port_gives_beat_metrics_on_a_registry_of_their_own(
    store: CountingStore, clock: ManualClock
) -> None:
    one = make_observer(Settings(metrics_port=9808), store, clock)
    two = make_observer(Settings(metrics_port=9809), store, clock)
    assert isinstance(one, BeatMetrics) and isinstance(two, BeatMetrics)
    assert one.registry is not two.registry and one.port == 9808
    assert isinstance(one.registry, SpecRegistry)


def test_the_spec_registry_leaves_out_the_created_series(
    store: CountingStore, clock: ManualClock
) -> None:
    metrics = BeatMetrics(SpecRegistry(), store=store, clock=clock)
    metrics.round_done(RoundStats(), 0.01)
    names = {s.name for family in metrics.registry.collect() for s in family.samples}
    assert "durable_beat_round_seconds_count" in names
    assert not [name for name in names if name.endswith("_created")]


# -- serve: the status collector ---------------------------------------------------------------
class Status:
    def __init__(self, epoch: int) -> None:
        self.counts = {"active": 3, "paused": 1, "archived": 0}
        self.due_backlog = 2
        self.epoch = epoch


def test_the_status_collector_reads_at_scrape_time_at_most_every_interval() -> None:
    reads: list[int] = []
    now = [0.0]

    def read() -> Status:
        reads.append(1)
        return Status(epoch=len(reads))

    registry = CollectorRegistry()
    registry.register(StatusCollector(read, min_interval=5, monotonic=lambda: now[0]))
    assert reads == []  # registering reads nothing
    assert registry.get_sample_value("durable_beat_schedules", {"state": "active"}) == 3
    assert registry.get_sample_value("durable_beat_schedules", {"state": "quarantined"}) == 0
    assert registry.get_sample_value("durable_beat_due_backlog") == 2
    assert registry.get_sample_value("durable_beat_fencing_epoch") == 1
    now[0] = 4.9
    assert registry.get_sample_value("durable_beat_fencing_epoch") == 1
    now[0] = 5.0
    assert registry.get_sample_value("durable_beat_fencing_epoch") == 2
    names = {f.name for f in registry.collect()}
    assert names == {
        "durable_beat_schedules",
        "durable_beat_due_backlog",
        "durable_beat_fencing_epoch",
    }


def test_status_registry_is_new_each_time_and_a_failed_read_fails_the_scrape() -> None:
    def down() -> Status:
        raise ConnectionError("store down")

    assert status_registry(lambda: Status(1)) is not status_registry(lambda: Status(1))
    with pytest.raises(ConnectionError):
        list(status_registry(down).collect())


def test_a_standing_is_published_after_the_counts_read_with_it() -> None:
    """A scrape that sees a standby's epoch sees the store's counts too (the counts are read
    first), and a failed read still publishes the standing."""
    registry = CollectorRegistry()
    seen_epoch: list[float | None] = []

    class Store:
        fail = False

        def counts_by_state(self) -> dict[str, int]:
            seen_epoch.append(registry.get_sample_value("durable_beat_fencing_epoch"))
            if self.fail:
                raise OSError("store down")
            return {"active": 3}

        def due_backlog(self, now_ms: int) -> int:
            return 0

        def now_ms(self) -> int:
            return T0

    store, clock = Store(), ManualClock()
    metrics = BeatMetrics(registry, store=store, clock=clock, store_every=10)
    metrics.standing(False, 7)
    assert seen_epoch == [0.0]  # read while the epoch was not yet published
    assert registry.get_sample_value("durable_beat_fencing_epoch") == 7
    assert registry.get_sample_value("durable_beat_schedules", {"state": "active"}) == 3
    store.fail = True
    clock.advance(10)
    with pytest.raises(OSError, match="store down"):
        metrics.standing(True, 8)  # the loop logs it (metrics_failed) and goes on
    assert registry.get_sample_value("durable_beat_leader") == 1
    assert registry.get_sample_value("durable_beat_fencing_epoch") == 8
