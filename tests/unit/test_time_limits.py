"""Hard time limits recorded by the worker's main process (``worker/time_limits.py``).

A request stands in for Celery's: its own ``on_timeout`` is recorded, its headers are
``request_dict``. Both topologies: claims that are the tracking rows (the store) and claims kept
apart from tracking (Redis), ``MemoryRuns`` standing in for each.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from celery.worker import state

from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.model import Action, Trigger
from celery_durable_beat.runs.base import RunKey, Runs, RunState
from celery_durable_beat.runs.memory import MemoryRuns
from celery_durable_beat.settings import Settings
from celery_durable_beat.worker.guard import GuardRuntime
from celery_durable_beat.worker.time_limits import TIME_LIMIT_OWNER, TimeLimitHook, hook

from ._support import FakeClock

pytestmark = pytest.mark.unit

T0 = 1_780_000_000_000
KEY = RunKey(tick_task_id("Nightly", T0), "Nightly", T0, Trigger.AUTO.value)
HEADERS = {"periodic_schedule": "Nightly", "periodic_tick_ms": T0, "periodic_trigger": "auto"}


class Request:
    """What the hook needs of ``celery.worker.request.Request``."""

    def __init__(self, task_id: str = KEY.task_id, headers: dict[str, Any] | None = None) -> None:
        self.id = task_id
        self.request_dict = {"id": task_id, **(HEADERS if headers is None else headers)}
        self.timeouts: list[tuple[bool, float]] = []

    def on_timeout(self, soft: bool, timeout: float) -> None:
        self.timeouts.append((soft, timeout))


@pytest.fixture(params=["store", "apart"])
def topology(request: pytest.FixtureRequest) -> Iterator[tuple[GuardRuntime, MemoryRuns]]:
    """A runtime and the backend that holds its claims (tracking is checked through it too)."""
    clock = FakeClock()
    claims = MemoryRuns(clock)
    tracking = claims if request.param == "store" else MemoryRuns(clock)
    runtime = GuardRuntime(Settings(dedup_ttl=60), Runs(claims, tracking), clock=clock)
    yield runtime, claims
    runtime.close()


def timed_out(runtime: GuardRuntime, request: Request, soft: bool = False) -> None:
    hook(request, lambda: runtime)
    request.on_timeout(soft, 1.0)


def recorded(runtime: GuardRuntime, claims: MemoryRuns) -> list[tuple[RunState, str | None]]:
    """The tick's row in the claims and in tracking."""
    rows = [claims.get_run(KEY.task_id), runtime.runs.get_run(KEY.task_id)]
    return [(row.state, row.owner) if row else (RunState.UNKNOWN, None) for row in rows]


def test_a_limit_before_the_claim_records_the_tick_failed(
    topology: tuple[GuardRuntime, MemoryRuns], caplog: pytest.LogCaptureFixture
) -> None:
    runtime, claims = topology
    request = Request()
    caplog.set_level(logging.WARNING, logger="celery_durable_beat.worker")
    timed_out(runtime, request)
    assert request.timeouts == [(False, 1.0)]  # Celery's own handling ran
    assert recorded(runtime, claims) == [(RunState.FAILED, TIME_LIMIT_OWNER)] * 2
    row = runtime.runs.get_run(KEY.task_id)
    assert row is not None and (row.schedule_key, row.tick_ms) == ("nightly", T0)
    assert [r.action for r in caplog.records] == [Action.TIME_LIMIT.value]  # type: ignore[attr-defined]
    # A pool process that reaches its claim after all is refused.
    assert claims.claim(KEY, "late", 0, 60_000) is RunState.FAILED


def test_a_limit_after_the_claim_replaces_the_running_state(
    topology: tuple[GuardRuntime, MemoryRuns],
) -> None:
    runtime, claims = topology
    runtime.enter(KEY, hostname="w", attempt=0, redelivered=False)
    timed_out(runtime, Request())
    assert recorded(runtime, claims) == [(RunState.FAILED, TIME_LIMIT_OWNER)] * 2


@pytest.mark.parametrize("killed_run_first", [True, False])
def test_the_killed_runs_own_failed_ends_with_the_reason_either_way(
    topology: tuple[GuardRuntime, MemoryRuns], killed_run_first: bool
) -> None:
    # The terminated pool process's ``task_postrun`` records ``failed`` of its own, before or
    # after the main process's record lands.
    runtime, claims = topology
    held = runtime.enter(KEY, hostname="w", attempt=0, redelivered=False)
    if killed_run_first:
        runtime.leave(held, RunState.FAILED)
    timed_out(runtime, Request())
    if not killed_run_first:
        runtime.leave(held, RunState.FAILED)
    assert recorded(runtime, claims) == [(RunState.FAILED, TIME_LIMIT_OWNER)] * 2


def test_a_limit_never_replaces_a_finished_run(topology: tuple[GuardRuntime, MemoryRuns]) -> None:
    runtime, claims = topology
    held = runtime.enter(KEY, hostname="w", attempt=0, redelivered=False)
    runtime.leave(held, RunState.SUCCEEDED)
    runtime.flush()  # the end reached the backends before the limit fired
    timed_out(runtime, Request())
    assert recorded(runtime, claims) == [(RunState.SUCCEEDED, held.owner)] * 2


@pytest.mark.parametrize("case", ["soft", "terminating", "no headers"])
def test_what_is_not_a_hard_limit_of_a_tick_is_not_recorded(
    topology: tuple[GuardRuntime, MemoryRuns], case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime, claims = topology
    request = Request(headers={} if case == "no headers" else None)
    if case == "terminating":  # a cold shutdown kills the pool: Celery says no time limit
        monkeypatch.setattr(state, "should_terminate", True)
    timed_out(runtime, request, soft=case == "soft")
    assert len(request.timeouts) == 1
    assert recorded(runtime, claims) == [(RunState.UNKNOWN, None)] * 2


def test_the_hook_does_not_keep_its_request_alive() -> None:
    request = Request()
    hook(request, lambda: None)  # type: ignore[arg-type, return-value]
    callback = request.on_timeout
    assert isinstance(callback, TimeLimitHook)
    del request
    gc.collect()
    callback(False, 1.0)  # the request is gone: nothing to do, nothing raised
