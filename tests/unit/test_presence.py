"""Worker presence on the in-memory runs: the beat's ``QueueWatch`` (``gates/live_queues.py``:
queues resolved as ``send_task`` routes, one read per round, fail open) and the worker's
``Announcer`` (due-based writes, the shared store circuit, forget at shutdown).

A fake clock moves only when told; the one real thread (``GuardRuntime.present``) is waited on
with a deadline poll."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from unittest import mock

import pytest
from celery import Celery

from celery_durable_beat.celery_message import send_kwargs
from celery_durable_beat.exceptions import StoreUnavailable
from celery_durable_beat.gates.live_queues import QueueRouter, QueueWatch
from celery_durable_beat.message import TickMessage
from celery_durable_beat.model import Action
from celery_durable_beat.runs.base import Runs, WorkerSeen
from celery_durable_beat.runs.memory import MemoryRuns
from celery_durable_beat.settings import Settings
from celery_durable_beat.worker.guard import GuardRuntime
from celery_durable_beat.worker.presence import Announcer, announce_every, consumed_queues
from celery_durable_beat.worker.tracker import CIRCUIT_S, Circuit

from ._support import FakeClock

pytestmark = pytest.mark.unit

T0 = 1_780_000_000_000
TTL_S = 60


class Registry(MemoryRuns):
    """``MemoryRuns`` that counts its reads and raises, as a store that does not answer,
    while ``down``."""

    down = False
    reads = 0

    def _check(self) -> None:
        if self.down:
            raise StoreUnavailable("the test took it down")

    def announce_worker(self, hostname: str, queues: Sequence[str]) -> None:
        self._check()
        super().announce_worker(hostname, queues)

    def forget_worker(self, hostname: str) -> None:
        self._check()
        super().forget_worker(hostname)

    def live_workers(self, ttl_ms: int) -> list[WorkerSeen]:
        self.reads += 1
        self._check()
        return super().live_workers(ttl_ms)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def registry(clock: FakeClock) -> Registry:
    return Registry(clock)


@pytest.fixture
def app() -> Iterator[Celery]:
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.task_routes = {"proj.report.*": {"queue": "reports"}}

    @app.task(name="proj.pinned", queue="pinned", shared=False)
    def pinned() -> None:
        """A task whose own options name its queue."""

    app.finalize()  # registers it (send_task reads the registry without finalizing)
    yield app
    app.close()


def tick(task: str = "proj.pulse", **options: Any) -> TickMessage:
    return TickMessage(
        schedule="s",
        task=task,
        args=(),
        kwargs={},
        options=options,
        task_id=f"s@{T0}",
        tick_ms=T0,
    )


# -- QueueWatch: the beat side --------------------------------------------------------------------


def test_a_tick_passes_only_when_a_live_worker_consumes_its_queue(
    app: Celery, registry: Registry
) -> None:
    registry.announce_worker("w1@a", ["celery", "reports"])
    check = QueueWatch(app, registry, TTL_S)()
    assert check(tick())  # the default queue
    assert check(tick("proj.report.daily"))  # task_routes
    assert not check(tick(queue="nightly"))  # nobody consumes it
    assert not check(tick("proj.pinned"))  # the task's own ``queue``
    assert check(tick("proj.pinned", queue="celery"))  # an explicit queue wins over it ...
    assert not check(tick("proj.report.daily", queue="nightly"))  # ... and over task_routes


@pytest.mark.parametrize(
    "message",
    [
        tick(),
        tick("proj.report.daily"),
        tick("proj.pinned"),
        tick("proj.pinned", queue="celery"),
        tick("proj.report.daily", queue="nightly"),
        tick(route_name="proj.report.x"),
        tick(queue="nightly", routing_key="rk", priority=3),
    ],
)
def test_the_queue_is_the_one_send_task_publishes_to(app: Celery, message: TickMessage) -> None:
    """Differential: what ``app.send_task`` (as the publisher calls it) hands to the broker."""
    sent: list[str] = []

    def capture(producer: Any, name: str, body: Any, **options: Any) -> None:
        sent.append(options["queue"].name)

    app.amqp.send_task_message = capture
    app.send_task(message.task, producer=mock.MagicMock(), **send_kwargs(message))
    assert QueueRouter(app)(message) == sent[0]


def test_the_default_queue_and_a_route_name_are_read_as_send_task_reads_them(
    app: Celery, registry: Registry
) -> None:
    app.conf.task_default_queue = "default-q"
    registry.announce_worker("w1@a", ["default-q"])
    check = QueueWatch(app, registry, TTL_S)()
    assert check(tick())
    assert not check(tick(route_name="proj.report.x"))  # routed as if it were that task


def test_only_workers_seen_within_the_ttl_count(
    app: Celery, registry: Registry, clock: FakeClock
) -> None:
    registry.announce_worker("old@a", ["reports"])
    clock.advance(30)
    registry.announce_worker("new@a", ["celery"])
    clock.advance(TTL_S - 30 + 0.001)  # old@a is 60.001 s old, new@a 30.001 s
    check = QueueWatch(app, registry, TTL_S)()
    assert check(tick())
    assert not check(tick("proj.report.daily"))


def test_one_read_per_round(app: Celery, registry: Registry) -> None:
    watch = QueueWatch(app, registry, TTL_S)
    check = watch()
    registry.announce_worker("late@a", ["celery"])  # after the round's read: not seen by it
    assert not check(tick()) and not check(tick(queue="x"))
    assert registry.reads == 1
    assert watch()(tick())
    assert registry.reads == 2


def test_an_unreadable_registry_lets_every_tick_through_with_one_warning(
    app: Celery, registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="celery_durable_beat")
    watch = QueueWatch(app, registry, TTL_S)
    registry.down = True
    for _ in range(3):
        assert watch()(tick(queue="nobody"))
    registry.down = False
    assert not watch()(tick(queue="nobody"))
    registry.down = True
    assert watch()(tick(queue="nobody"))  # a second outage warns again
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [getattr(r, "action", None) for r in warned] == [
        Action.RUN_TRACKING_UNAVAILABLE.value
    ] * 2


def test_a_tick_that_cannot_be_routed_passes_so_its_publish_reports_it(
    app: Celery, registry: Registry
) -> None:
    app.conf.task_create_missing_queues = False
    app.conf.task_queues = ()
    check = QueueWatch(app, registry, TTL_S)()
    assert check(tick(queue="undeclared"))


# -- the worker side ------------------------------------------------------------------------------


def announcer(
    registry: Registry, clock: FakeClock, queues: Callable[[], Sequence[str]] | None = None
) -> Announcer:
    circuit = Circuit("the test store", Action.RUN_TRACKING_UNAVAILABLE, "meanwhile", clock)
    return Announcer(
        registry,
        "w1@a",
        queues or (lambda: ["reports", "celery", "reports"]),
        announce_every(TTL_S),
        circuit,
        clock,
    )


def test_an_announcer_writes_at_most_once_per_interval(
    registry: Registry, clock: FakeClock
) -> None:
    seen = announcer(registry, clock)
    seen.beat()
    assert registry.live_workers(1) == [WorkerSeen("w1@a", ("celery", "reports"), T0)]
    clock.advance(19.9)
    seen.beat()
    assert registry.live_workers(TTL_S * 1000)[0].last_seen_ms == T0
    clock.advance(0.1)
    seen.beat()
    assert registry.live_workers(TTL_S * 1000)[0].last_seen_ms == T0 + 20_000
    assert announce_every(TTL_S) == 20 and announce_every(0.1) == 0.5


def test_an_outage_is_logged_once_and_never_raised(
    registry: Registry, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="celery_durable_beat")
    seen = announcer(registry, clock)
    registry.down = True
    for _ in range(5):
        seen.beat()
        clock.advance(announce_every(TTL_S))
    registry.down = False
    clock.advance(CIRCUIT_S)
    seen.beat()
    assert [w.hostname for w in registry.live_workers(1)] == ["w1@a"]
    actions = [getattr(r, "action", None) for r in caplog.records]
    assert actions == [
        Action.RUN_TRACKING_UNAVAILABLE.value,
        Action.RUN_TRACKING_RESTORED.value,
    ]


def test_forget_deletes_the_row_and_stops_later_announcements(
    registry: Registry, clock: FakeClock
) -> None:
    seen = announcer(registry, clock)
    seen.beat()
    seen.forget()
    assert registry.live_workers(TTL_S * 1000) == []
    clock.advance(TTL_S)
    seen.beat()
    assert registry.live_workers(TTL_S * 1000) == []
    registry.down = True
    announcer(registry, clock).forget()  # a store that does not answer: no error


def test_the_guard_runtime_announces_at_once_and_on_its_heartbeat(
    registry: Registry, clock: FakeClock
) -> None:
    settings = Settings(run_ttl=300, worker_ttl=TTL_S)
    runtime = GuardRuntime(settings, Runs(claims=registry, tracking=registry), clock=clock)
    try:
        queues = ["celery"]
        runtime.present("w1@a", lambda: queues)
        deadline = time.monotonic() + 10
        while not registry.live_workers(1) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert registry.live_workers(1) == [WorkerSeen("w1@a", ("celery",), T0)]
        assert runtime._interval() == TTL_S / 3  # the worker TTL, shorter than the run TTL's
        runtime.present("w1@a", lambda: ["celery", "extra"])  # the consumer restarted
        clock.advance(announce_every(TTL_S))
        runtime.heartbeat_once()
        assert registry.live_workers(1)[0].queues == ("celery", "extra")
        runtime.forget()
        assert registry.live_workers(TTL_S * 1000) == []
        runtime.present("w1@a", lambda: ["celery"])  # a worker started anew in this process
        runtime.heartbeat_once()
        assert registry.live_workers(1)[0].queues == ("celery",)
    finally:
        runtime.close()


class _Queue:
    def __init__(self, name: str) -> None:
        self.name = name


class _Consumer:
    def __init__(self, app: Celery, task_consumer: Any) -> None:
        self.app = app
        self.task_consumer = task_consumer


def test_consumed_queues_are_the_task_consumers_else_the_apps_selection(app: Celery) -> None:
    task_consumer = mock.Mock(queues=[_Queue("b"), _Queue("a"), _Queue("b")])
    assert consumed_queues(_Consumer(app, task_consumer)) == ["a", "b"]
    app.amqp.queues.select(["reports"])
    assert consumed_queues(_Consumer(app, None)) == ["reports"]  # reconnecting
