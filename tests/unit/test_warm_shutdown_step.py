"""``worker/shutdown.py``: a closing pool's flush keeps the jobs processes hold.

Celery's own ``AsynPool.flush`` runs here on a stand-in pool (its attributes, billiard's real
``ApplyResult`` jobs, no processes), so the test holds the remedy to the installed Celery's code:
unwrapped, the flush drops a job written to a live process whose ACK was not read yet; wrapped,
a closing pool keeps it, and a running pool (a consumer restart) is left as Celery does it.
"""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace
from typing import Any

import pytest
from billiard.pool import CLOSE, RUN, ApplyResult
from celery import Celery
from celery.concurrency.asynpool import AsynPool

from celery_durable_beat import install
from celery_durable_beat.worker import shutdown
from celery_durable_beat.worker.shutdown import (
    KeepHeldJobs,
    WarmShutdownStep,
    celery_supported,
    held_jobs,
    keep_held_jobs,
)

pytestmark = pytest.mark.unit


class Proc:
    fds = iter(range(100, 10_000))

    def __init__(self, alive: bool = True) -> None:
        self.alive = alive
        self.inqW_fd = next(self.fds)

    def _is_alive(self) -> bool:
        return self.alive


def stand_in_pool(state: int) -> Any:
    pool = SimpleNamespace(
        _state=state,
        _cache={},
        synack=False,
        outbound_buffer=deque(),
        _active_writers=set(),
        _active_writes=set(),
        _busy_workers=set(),
        maintain_pool=lambda: None,
        _flush_writer=lambda proc, writer: None,
    )
    pool.flush = lambda: AsynPool.flush(pool)
    return pool


def job(pool: Any, *, written_to: Proc | None = None, accepted: bool = False) -> ApplyResult:
    found = ApplyResult(pool._cache, callback=None)
    found._write_to = written_to
    found._accepted = accepted
    return found


def jobs_of(pool: Any) -> tuple[ApplyResult, ApplyResult, ApplyResult, ApplyResult]:
    return (
        job(pool, written_to=Proc()),  # held: in a live process's pipe, no ACK read yet
        job(pool, written_to=Proc(), accepted=True),  # running
        job(pool),  # never written: its message goes back to the queue
        job(pool, written_to=Proc(alive=False)),  # its process is gone
    )


def test_celery_alone_drops_a_job_a_live_process_holds() -> None:
    pool = stand_in_pool(CLOSE)
    _, running, _, _ = jobs_of(pool)
    pool.flush()
    assert set(pool._cache) == {running._job}  # the held job is gone, yet its process runs it


def test_a_closing_pool_keeps_the_jobs_processes_hold() -> None:
    pool = stand_in_pool(CLOSE)
    held, running, _, _ = jobs_of(pool)
    taskpool = SimpleNamespace(_pool=pool, flush=pool.flush)
    assert keep_held_jobs(taskpool)
    taskpool.flush()
    assert set(pool._cache) == {held._job, running._job}


def test_a_running_pool_is_flushed_as_celery_does_it() -> None:
    pool = stand_in_pool(RUN)
    _, running, _, _ = jobs_of(pool)
    taskpool = SimpleNamespace(_pool=pool, flush=pool.flush)
    keep_held_jobs(taskpool)
    taskpool.flush()  # a consumer restart after a lost connection
    assert set(pool._cache) == {running._job}


def test_held_jobs_are_the_unacknowledged_ones_in_live_processes() -> None:
    pool = stand_in_pool(CLOSE)
    held, _, _, _ = jobs_of(pool)
    assert list(held_jobs(pool).values()) == [held]


def test_a_partly_written_job_is_written_out_first() -> None:
    pool = stand_in_pool(CLOSE)
    held, _, _, _ = jobs_of(pool)
    writer = iter(())
    held._writer = lambda: writer
    pool._active_writers.add(writer)
    flushed: list[Any] = []
    pool._flush_writer = lambda proc, gen: flushed.append((proc, gen))
    KeepHeldJobs(SimpleNamespace(_pool=pool), pool.flush)()
    assert flushed == [(held._write_to, writer)]


def test_wrapping_is_idempotent_and_only_for_the_prefork_pool() -> None:
    pool = stand_in_pool(CLOSE)
    taskpool = SimpleNamespace(_pool=pool, flush=pool.flush)
    keep_held_jobs(taskpool)
    wrapped = taskpool.flush
    assert keep_held_jobs(taskpool) and taskpool.flush is wrapped
    solo = SimpleNamespace(_pool=None, flush=None)
    assert not keep_held_jobs(solo) and solo.flush is None


def test_an_unverified_celery_keeps_its_own_flush(monkeypatch: pytest.MonkeyPatch) -> None:
    assert celery_supported((5, 7)) and celery_supported((5, 5))
    assert not celery_supported((5, 8)) and not celery_supported((4, 4))
    monkeypatch.setattr(shutdown, "celery_supported", lambda: False)
    pool = stand_in_pool(CLOSE)
    taskpool = SimpleNamespace(_pool=pool, flush=pool.flush)
    assert not keep_held_jobs(taskpool) and not isinstance(taskpool.flush, KeepHeldJobs)


def test_install_adds_the_step_to_the_consumer() -> None:
    app = Celery("shutdown-step", set_as_current=False)
    install(app)
    assert WarmShutdownStep in app.steps["consumer"]
