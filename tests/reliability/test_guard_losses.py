"""No tick lost to the guard itself (SPEC §6, issue 43): each way the guard could still lose a
tick, made to happen with real workers, ends with the tick run exactly once.

- **A time limit while a redelivered copy waits for a dead claim.** Worker A is SIGKILLed mid-run
  of an ``acks_late`` tick: its claim stays ``started`` until ``run_ttl`` ends. The broker gives
  the message back to worker B, whose copy waits for that claim — but B's time limit (the
  worker's ``--time-limit``, or the message's ``soft_time_limit``) is shorter than what is left
  of it. Unremedied, the hard limit recorded the tick ``failed`` and Celery acknowledged the
  message unrun; the soft one escaped the wait as ``SoftTimeLimitExceeded`` and Celery
  acknowledged it too, history staying ``started``. Now the copy waits at most a quarter of its
  shortest limit and gives its message back to the broker (``requeued_for_claim``), so the
  delivery that finds the claim expired runs the tick with its whole limit.
- **A cold shutdown (SIGQUIT) of a worker running an ``acks_late`` tick.** Celery cancels the run
  and leaves its message unacknowledged; the broker redelivers it. Unremedied, the guard recorded
  the cut-short run ``failed`` (the pool process's ``task_postrun`` after ``SystemExit``, and the
  main process's ``WorkerLostError``) and refused the redelivery. Now the run gives its claim
  back, and the redelivery runs at once — within far less than ``run_ttl`` (60 s here), which is
  what a claim merely left ``started`` would make it wait.

Both on a Redis broker (claims in Redis) and on RabbitMQ (claims in the store).
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.model import Action
from celery_durable_beat.runs.base import RunState
from tests.support.procs import wait_until
from tests.support.rig import ProcessRig, rig_factory, tick_headers

pytestmark = pytest.mark.reliability

T0 = 1_780_000_000_000
BACKENDS = ["claims in Redis", "claims in the store"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _rig(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, pg_url: str, run_ttl: float
) -> Iterator[ProcessRig]:
    """A rig whose unacknowledged messages come back within seconds: Redis's visibility timeout
    of 3 s, or RabbitMQ's own redelivery when the consumer's connection closes."""
    with rig_factory(tmp_path, ProcessRig) as make:
        if backend == "claims in Redis":
            yield make(
                pg_url,
                request.getfixturevalue("redis_url"),
                visibility_timeout=3,
                run_ttl=run_ttl,
            )
        else:
            queue = f"losses-{uuid.uuid4().hex[:8]}"
            yield make(pg_url, request.getfixturevalue("amqp_url"), queue=queue, run_ttl=run_ttl)


@pytest.fixture
def dead_claim_rig(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, pg_url: str
) -> Iterator[ProcessRig]:
    """Run TTL 12 s: a claim left by a killed worker outlives the second worker's 3 s limit."""
    yield from _rig(backend, request, tmp_path, pg_url, run_ttl=12)


@pytest.fixture
def cold_rig(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, pg_url: str
) -> Iterator[ProcessRig]:
    """Run TTL 60 s: a redelivery that had to wait for the claim would miss the test's bound."""
    yield from _rig(backend, request, tmp_path, pg_url, run_ttl=60)


def _ran_once(rig: ProcessRig, task_id: str) -> None:
    """Two starts (the cut-short run and the redelivery's) and one end; recorded succeeded, and
    no delivery of the tick left in the broker."""
    wait_until(lambda: rig.rows("end"), 60, "the redelivered run to finish")
    wait_until(lambda: rig.state(task_id) is RunState.SUCCEEDED, 20, "its end recorded")
    wait_until(rig.drained, 20, "every delivery of the tick acked")
    assert [r["event"] for r in rig.rows()] == ["start", "start", "end"]
    assert {r["id"] for r in rig.rows()} == {task_id}


@pytest.mark.parametrize("limit", ["--time-limit", "soft_time_limit"])
@pytest.mark.timeout(150)
def test_a_time_limit_never_fires_on_a_copy_waiting_for_a_dead_claim(
    dead_claim_rig: ProcessRig, limit: str
) -> None:
    rig = dead_claim_rig
    first = rig.worker("prefork", 1)
    task_id = tick_task_id("Limited", T0)
    options = {"soft_time_limit": 3} if limit == "soft_time_limit" else {}
    rig.send("procapp.late_sleepy", task_id, tick_headers("Limited", T0), args=(1.5,), **options)
    wait_until(lambda: rig.rows("start"), 20, "the first run to start")
    first.kill()  # main process and pool child, mid-run: the claim stays started, unacked
    flags = ["--time-limit", "3"] if limit == "--time-limit" else []
    second = rig.worker("prefork", 1, flags=flags)
    requeued = second.wait_action(Action.REQUEUED_FOR_CLAIM.value, 30)
    assert task_id in requeued[0]["message"]  # the copy met the dead claim and gave it back
    _ran_once(rig, task_id)
    output = second.output()
    assert "Hard time limit" not in output and "SoftTimeLimitExceeded" not in output
    assert not second.actions(Action.DUPLICATE_REFUSED.value)


@pytest.mark.timeout(120)
def test_a_cold_shutdown_gives_an_acks_late_tick_back_to_its_redelivery(
    cold_rig: ProcessRig,
) -> None:
    rig = cold_rig
    first = rig.worker("prefork", 1)
    task_id = tick_task_id("Cold", T0)
    rig.send("procapp.late_sleepy", task_id, tick_headers("Cold", T0), args=(3,))
    wait_until(lambda: rig.rows("start"), 20, "the run to start")
    first.signal(signal.SIGQUIT)  # cold shutdown: Celery cancels the run, its message unacked
    assert first.wait_exit(30) is not None, first.tail()
    assert not rig.rows("end")  # cut short
    second = rig.worker("solo")
    _ran_once(rig, task_id)
    assert not second.actions(Action.DUPLICATE_REFUSED.value)
