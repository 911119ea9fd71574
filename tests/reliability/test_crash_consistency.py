"""The crash-consistency proof: publish at least once + the worker guard = execute once.

50 schedules ``@every 1s`` with ``missed: backfill``, a real prefork worker with
``install(app)``, a real beat on PostgreSQL, with each broker: Redis (lease in the store), and
RabbitMQ (a queue of the test's own; lease and the guard's claims in Redis), where ``enqueued``
rests on publisher confirms. The beat is killed with SIGKILL over and over: at random instants,
and at the round's crash points through a fault plan its process arms
(``celery_durable_beat/faults.py``, the rig's ``fault`` setting): after publish before the
audit-and-advance write, after it, mid-batch. Each time a new beat starts. Afterwards, for every
schedule, the executed ticks have no gap between the first and the last, and no tick executed
twice; the broker duplicates the crashes caused are counted (the worker's receipts, and the
guard's shared counter).

A short trial runs by default; ``-m slow`` runs the full one, 500 kills on each broker (1,000 in
all; ``DURABLE_BEAT_PROOF_KILLS`` per broker, ``DURABLE_BEAT_PROOF_SEED``), and prints the figures
(also written to ``proof-figures.json`` in the test's temporary folder):

    DURABLE_BEAT_TEST_REDIS=redis://127.0.0.1:6379/13 \
      .venv/bin/python -m pytest -m slow tests/reliability/test_crash_consistency.py -s
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest

from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.model import Action
from tests.support.procs import wait_until
from tests.support.rig import ProcessRig, rig_factory, tick_headers

pytestmark = pytest.mark.reliability

SCHEDULES = {
    f"crash-{i:02d}": {
        "task": "procapp.record",
        "schedule": "@every 1s",
        "missed": "backfill",
        "backfill_max": 1000,
    }
    for i in range(50)
}
MODES = ("random", "after_publish", "after_audit", "mid_batch")
INJECTED = "durable-beat fault injected at "
T0 = 1_780_000_000_000


@dataclass
class Figures:
    """What a proof run did and saw."""

    trials: int = 0
    kills_random: int = 0
    kills_injected: dict[str, int] = field(default_factory=dict)
    executions: int = 0
    distinct_ticks: int = 0
    messages_received: int = 0
    duplicates_published: int = 0
    duplicates_refused: int = 0
    duplicates_executed: int = 0
    gaps: list[str] = field(default_factory=list)
    enqueued_not_executed: int = 0
    seconds: float = 0.0

    @property
    def kills(self) -> int:
        return self.kills_random + sum(self.kills_injected.values())


HISTORY_KEEP = 50_000
"""Audit records kept a schedule: more than a 500-kill run makes (about one a second)."""


@pytest.fixture(params=["redis", "rabbitmq"])
def rig(
    request: pytest.FixtureRequest, tmp_path: Path, pg_url: str, redis_url: str
) -> Iterator[ProcessRig]:
    """The proof's processes on one broker (the parameter)."""
    # Every audit record stays (the default keeps 100 a schedule), so the last check, every
    # tick audited ``enqueued`` was executed, covers the whole run, not its last 100 seconds.
    keep = HISTORY_KEEP
    with rig_factory(tmp_path, ProcessRig) as make:
        if request.param == "redis":
            yield make(pg_url, redis_url, lease_ttl=2, poll=0.2, history_keep=keep)
            return
        amqp_url = str(request.getfixturevalue("amqp_url"))
        queue = f"crash-{uuid.uuid4().hex[:8]}"
        yield make(
            pg_url,
            amqp_url,
            lease_ttl=2,
            poll=0.2,
            queue=queue,
            lease_url=redis_url,
            history_keep=keep,
        )


@pytest.fixture
def burst_rig(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[ProcessRig]:
    """The proof's processes with rounds of 10 schedules: the 50 schedules' ticks of each second
    are a burst of 5 full rounds, each settled beside the next one's claim (``burst.py``; the
    claim after the fifth finds none), so a ``fenced_write`` kill lands on the settling thread
    (but where the loop's 1 s budget or the lease ends a burst early)."""
    with rig_factory(tmp_path, ProcessRig) as make:
        yield make(
            pg_url, redis_url, lease_ttl=2, poll=0.2, history_keep=HISTORY_KEEP, batch_size=10
        )


def one_trial(rig: ProcessRig, rng: random.Random, mode: str, figures: Figures) -> None:
    """Start a beat, let it die (killed, or by the injected fault), leave it down a moment."""
    # mid_batch counts schedules, 50 a round: up to 100 reaches into a catch-up round's later
    # confirmed chunks (CONFIRM_EVERY); the others count rounds.
    nth = rng.randint(1, 100 if mode == "mid_batch" else 4)
    fault = None if mode == "random" else f"{mode}:{nth}"
    beat = rig.beat(schedule=SCHEDULES, fault=fault)
    if mode == "random":
        time.sleep(rng.uniform(0.3, 4.0))  # the random kill instant: a parameter, not a wait
    else:
        beat.wait_exit(30)  # the injected fault kills it; at the deadline the test does
    alive = beat.alive()
    beat.signal(signal.SIGKILL)
    beat.kill()
    out = beat.output()
    if INJECTED in out:
        point = out.split(INJECTED, 1)[1].split()[0]
        figures.kills_injected[point] = figures.kills_injected.get(point, 0) + 1
    else:
        assert alive, f"beat exited by itself:\n{out[-3000:]}"
        figures.kills_random += 1
    figures.trials += 1
    beat.close()
    time.sleep(rng.uniform(0.0, 1.5))  # downtime: backfill catches up on restart


def settle(rig: ProcessRig) -> None:
    """A last beat runs normally and stops cleanly; then the worker drains everything."""
    beat = rig.beat(schedule=SCHEDULES)
    # Until it leads, the worker may still be draining earlier beats' ticks: counting from
    # then, 100 runs could come before this beat has even started (and SIGTERM kill it).
    beat.wait_action(Action.LEADERSHIP_GAINED.value, 30)
    seen = len(rig.rows("run"))
    rig.wait_rows(seen + 100, 90, "run")
    assert beat.stop() == 0, beat.output()[-3000:]
    # Hundreds of kills on a loaded machine leave a backlog: the bound that matters is the
    # progress one (no run for a minute while work is queued), not the total.
    wait_drained(rig, most_s=3600)


def wait_drained(rig: ProcessRig, stall_s: float = 60.0, most_s: float = 400.0) -> None:
    """Until the queue is empty and the runs stop growing. A loaded machine makes the worker
    lag minutes behind the ticks, so the deadline is on *progress*: fail if no run was added for
    ``stall_s`` while work is still queued (a stuck worker), or after ``most_s`` in all."""
    stable: list[int] = []
    last_change = [time.monotonic()]

    def quiet() -> bool:
        stable.append(len(rig.rows("run")))
        if len(stable) > 1 and stable[-1] != stable[-2]:
            last_change[0] = time.monotonic()
        stalled = time.monotonic() - last_change[0] > stall_s
        assert not (stalled and not rig.drained()), f"no run for {stall_s:g}s, queue not empty"
        return rig.drained() and len(stable) > 20 and len(set(stable[-20:])) == 1

    wait_until(quiet, most_s, "the worker to drain the queue")


def evidence(rig: ProcessRig, figures: Figures) -> Figures:
    runs = rig.rows("run")
    per_id = Counter(r["id"] for r in runs)
    figures.executions = len(runs)
    figures.distinct_ticks = len(per_id)
    figures.duplicates_executed = sum(n - 1 for n in per_id.values())
    receipts = Counter(r["id"] for r in rig.receipts())
    figures.messages_received = sum(receipts.values())
    figures.duplicates_published = sum(n - 1 for n in receipts.values())
    figures.duplicates_refused = rig.shared_counters().get("duplicates_refused", 0)
    by_schedule: dict[str, set[int]] = {}
    for r in runs:
        by_schedule.setdefault(r["schedule"], set()).add(r["tick_ms"])
    assert set(by_schedule) == set(SCHEDULES)
    for name, ticks in sorted(by_schedule.items()):
        ordered = sorted(ticks)
        missing = sorted(set(range(ordered[0], ordered[-1] + 1, 1000)) - ticks)
        if missing:
            figures.gaps.append(f"{name}: {len(missing)} missing, first {missing[0]}")
    enqueued = {
        e.task_id for name in SCHEDULES for e in rig.history(name) if e.outcome.value == "enqueued"
    }
    figures.enqueued_not_executed = len(enqueued - set(per_id))
    return figures


def prove(
    rig: ProcessRig, kills: int, seed: int, tmp_path: Path, modes_of: Sequence[str] = MODES
) -> Figures:
    started = time.monotonic()
    rng = random.Random(seed)
    rig.worker("prefork", 4)
    figures = Figures()
    modes = [modes_of[i % len(modes_of)] for i in range(kills)]
    rng.shuffle(modes)
    for mode in modes:
        one_trial(rig, rng, mode, figures)
    settle(rig)
    evidence(rig, figures)
    figures.seconds = round(time.monotonic() - started, 1)
    report = {**asdict(figures), "kills": figures.kills, "seed": seed}
    (tmp_path / "proof-figures.json").write_text(json.dumps(report, indent=2))
    print("crash-consistency figures:", json.dumps(report))
    assert figures.duplicates_executed == 0, report
    assert not figures.gaps, report
    assert figures.enqueued_not_executed == 0, report
    assert figures.duplicates_refused >= figures.duplicates_published, report
    return figures


@pytest.mark.timeout(900)
def test_kill_9_at_any_point_executes_every_tick_exactly_once(
    rig: ProcessRig, tmp_path: Path
) -> None:
    figures = prove(rig, kills=12, seed=20261130, tmp_path=tmp_path)
    assert figures.kills == 12
    assert set(figures.kills_injected) == set(MODES) - {"random"}


BURST_MODES = (*MODES, "fenced_write")
"""In a burst, ``fenced_write`` is reached on the settling thread, beside the next claim."""


BURST_PROOF_KILLS = int(os.environ.get("DURABLE_BEAT_BURST_PROOF_KILLS", "10"))


@pytest.mark.timeout(600 + 30 * BURST_PROOF_KILLS)
def test_kill_9_inside_bursts_executes_every_tick_exactly_once(
    burst_rig: ProcessRig, tmp_path: Path
) -> None:
    """The same proof with every second a burst of rounds whose settles overlap the next
    rounds' claims: a kill lands with a settle in flight and the next round claimed."""
    kills = BURST_PROOF_KILLS
    seed = int(os.environ.get("DURABLE_BEAT_PROOF_SEED", "20261202"))
    figures = prove(burst_rig, kills=kills, seed=seed, tmp_path=tmp_path, modes_of=BURST_MODES)
    assert figures.kills == kills
    assert set(figures.kills_injected) == set(BURST_MODES) - {"random"}


PROOF_KILLS = int(os.environ.get("DURABLE_BEAT_PROOF_KILLS", "500"))


@pytest.mark.slow
@pytest.mark.timeout(12 * 3600)
def test_full_proof_500_kills_per_broker(rig: ProcessRig, tmp_path: Path) -> None:
    seed = int(os.environ.get("DURABLE_BEAT_PROOF_SEED", str(int(time.time()))))
    figures = prove(rig, kills=PROOF_KILLS, seed=seed, tmp_path=tmp_path)
    assert figures.kills == PROOF_KILLS


@pytest.fixture
def redis_rig(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[ProcessRig]:
    """Processes on Redis only: the guard's race below does not depend on the broker."""
    with rig_factory(tmp_path, ProcessRig) as make:
        yield make(pg_url, redis_url, lease_ttl=2, poll=0.2)


@pytest.mark.timeout(300)
def test_two_workers_given_the_same_tick_at_once_execute_it_once(redis_rig: ProcessRig) -> None:
    rig = redis_rig
    rig.worker("solo", 1)
    rig.worker("solo", 1)
    pairs = 12
    for i in range(pairs):
        task_id = tick_task_id("pair", T0 + i * 1000)
        headers = tick_headers("pair", T0 + i * 1000)
        for _ in range(2):  # the same tick twice, back to back: one message per idle worker
            rig.send("procapp.late_sleepy", task_id, headers, args=(0.3,))
        wait_until(rig.drained, 20, "both deliveries handled")
        time.sleep(0.3)
    wait_until(lambda: len(rig.rows("end")) == pairs, 30, "every tick executed")
    runs = Counter(r["id"] for r in rig.rows("start"))
    assert set(runs.values()) == {1}, runs
    received: dict[str, set[int]] = {}
    for r in rig.receipts():
        received.setdefault(r["id"], set()).add(r["pid"])
    both = [i for i, pids in received.items() if len(pids) == 2]
    assert len(both) >= pairs // 2, received  # most pairs really went to both workers at once
    assert rig.shared_counters()["duplicates_refused"] == pairs
