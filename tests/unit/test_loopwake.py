"""``worker/loopwake.py`` on a real Kombu hub: a callback queued while the loop runs its ready
callbacks runs on the next turn at once, not after the poll's timeout; an idle loop is not
woken."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kombu.asynchronous import Hub

from celery_durable_beat.worker.loopwake import LoopWake, LoopWakeStep

pytestmark = pytest.mark.unit  # in-process: a Kombu hub and a socketpair, no server


@pytest.fixture
def hub() -> Iterator[Hub]:
    hub = Hub()
    yield hub
    hub.close()


@pytest.fixture
def wake(hub: Hub) -> Iterator[LoopWake]:
    wake = LoopWake(hub)
    wake.attach()
    yield wake
    wake.close()


def queued_from_a_callback(hub: Hub) -> dict[str, float]:
    """Queue a callback that queues another, as the AMQP reader queues a task's ack; when each
    ran."""
    ran: dict[str, float] = {}

    def first() -> None:
        ran["first"] = time.monotonic()
        hub.call_soon(lambda: ran.setdefault("second", time.monotonic()))

    hub.call_soon(first)
    return ran


def turns(hub: Hub, count: int) -> float:
    loop = hub.create_loop()
    start = time.monotonic()
    for _ in range(count):
        next(loop)
    return time.monotonic() - start


def test_a_callback_queued_by_a_callback_runs_without_waiting_for_the_poll(
    hub: Hub, wake: LoopWake
) -> None:
    ran = queued_from_a_callback(hub)
    turns(hub, 2)
    assert ran["second"] - ran["first"] < 0.5  # the hub's poll waits 1 s with no timer


def test_without_it_the_callback_waits_for_the_poll(hub: Hub) -> None:
    """The bug itself, so a Kombu that fixes it shows here (then ``LoopWake`` can go)."""
    idle, other = socket.socketpair()
    hub.add_reader(idle, lambda: None)  # the hub polls only while it has a reader
    ran = queued_from_a_callback(hub)
    try:
        turns(hub, 2)
    finally:
        idle.close()
        other.close()
    assert ran["second"] - ran["first"] >= 0.9


def test_an_idle_loop_sleeps_in_its_poll(hub: Hub, wake: LoopWake) -> None:
    took = turns(hub, 1)
    assert took >= 0.9  # nothing queued: no wakeup, the poll waits its 1 s
    with pytest.raises(BlockingIOError):
        wake._reader.recv(1)


def test_the_step_attaches_to_the_consumers_hub_and_skips_a_consumer_without_one(
    hub: Hub,
) -> None:
    consumer: Any = type("C", (), {"hub": hub})()
    step = LoopWakeStep(consumer)
    step.start(consumer)
    step.start(consumer)  # a restart: attached again, the same wake
    assert step.wake is not None and step.wake._before_poll in hub.on_tick
    step.shutdown(consumer)
    assert step.wake is None and not hub.on_tick
    bare: Any = type("C", (), {"hub": None})()
    LoopWakeStep(bare).start(bare)
