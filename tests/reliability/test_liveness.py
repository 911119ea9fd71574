"""``/healthz`` on real beat processes (SPEC §17): 503 for a loop that stopped turning, never
for a healthy standby. Each test runs on both lease backends.

The store is a PostgreSQL cluster of the module's own, frozen with SIGSTOP (the postmaster and
every backend): a host that stops answering without closing a connection, so beat's store calls
wait rather than fail. The rule under test (``liveness.py``, ``beat_loop.py``): a turn is a
round, or a standby's lease attempt, whose backends answered; ``/healthz`` answers 503 once
``durable_beat_liveness_s`` (plus the sleep planned after the last turn) has passed without one.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from itertools import groupby
from pathlib import Path
from typing import Any

import pytest

from celery_durable_beat.model import Action
from tests.reliability.conftest import every_second
from tests.support.procs import CeleryProcess, free_port, wait_until
from tests.support.servers import ThrowawayPostgres

pytestmark = pytest.mark.reliability

LIVE_S = 3.0
"""``durable_beat_liveness_s`` of the beats here: small, so a stall shows within seconds."""
POLL_S = 0.2
"""The rigs' poll interval: the longest sleep between two turns of a healthy loop."""
TTL = 6.0
SLACK_S = 1.5
"""Beyond ``LIVE_S`` plus a round: the probe's own interval and a loaded CI machine."""
HOLD_S = 2.5 * LIVE_S
"""How long the store stays frozen: several windows, and past the lease's TTL."""


@pytest.fixture
def cluster_db(cluster: ThrowawayPostgres) -> str:
    return cluster.create_database(f"dbt_{uuid.uuid4().hex[:16]}")


def healthz(port: int) -> tuple[int, dict[str, Any]] | None:
    """``GET /healthz``: its status and JSON body; None while nothing answers on the port."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())
    except OSError:
        return None


def metrics_status(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
        return int(answer.status)


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (PostgreSQL's backends, checkpointer, ...)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after the command's name
        except (OSError, IndexError):
            continue  # a process that ended while we looked
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@contextmanager
def frozen(cluster: ThrowawayPostgres) -> Iterator[None]:
    """SIGSTOP the whole server, the postmaster first (so it forks nothing meanwhile), and
    SIGCONT it on the way out whatever happened: its connections stay open, nothing answers."""
    postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
    os.kill(postmaster, signal.SIGSTOP)
    pids = [postmaster]
    try:
        for child in _children(postmaster):
            os.kill(child, signal.SIGSTOP)
            pids.append(child)
        yield
    finally:
        for pid in reversed(pids):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


class Probe:
    """``/healthz`` asked every 0.1 s, every answer kept with its instant, as a kubelet would."""

    def __init__(self, beat: CeleryProcess, port: int) -> None:
        self.beat = beat
        self.port = port
        self.answers: list[tuple[float, int, dict[str, Any]]] = []

    def ask(self) -> tuple[int, dict[str, Any]] | None:
        answer = healthz(self.port)
        if answer is not None:
            self.answers.append((time.monotonic(), *answer))
        return answer

    def until(self, status: int, timeout: float, what: str, role: str | None = None) -> float:
        """Ask until an answer has ``status`` (and ``role``); the instant it came."""

        def arrived() -> bool:
            answer = self.ask()
            return (
                answer is not None
                and answer[0] == status
                and (role is None or answer[1]["role"] == role)
            )

        try:
            wait_until(arrived, timeout, what)
        except AssertionError as exc:  # say what the beat said, and what it answered
            shown = "\n".join(self.changes(since=self.answers[0][0] if self.answers else 0.0))
            raise AssertionError(f"{exc}\nanswers:\n{shown}\n{self.beat.tail()}") from None
        return self.answers[-1][0]

    def changes(self, since: float) -> list[str]:
        """The first and the last answer of each run of one status and role, timed from
        ``since`` (what a failure shows: 200 -> 503 -> 200)."""
        ends = []
        for _, run in groupby(self.answers, key=lambda a: (a[1], a[2]["role"])):
            answers = list(run)
            ends += answers[:1] + answers[1:][-1:]
        return [f"{at - since:+.2f}s {status} {json.dumps(body)}" for at, status, body in ends]


def _lease(backend: str, redis_url: str) -> str | None:
    return redis_url if backend == "redis" else None


def test_a_leader_on_a_frozen_store_answers_503_and_200_again_once_it_thaws(
    make_rig: Any,
    cluster: ThrowawayPostgres,
    cluster_db: str,
    private_redis: str,
    lease_backend: str,
) -> None:
    rig = make_rig(
        cluster_db, private_redis, _lease(lease_backend, private_redis), every_second("s"), TTL
    )
    port = free_port()
    beat: CeleryProcess = rig.beat("beat-a", metrics_port=port, liveness_s=LIVE_S)
    probe = Probe(beat, port)
    probe.until(200, 60, "beat-a to answer 200 as the leader", role="leader")
    probe.until(200, 5, "one more 200 as the leader", role="leader")

    with frozen(cluster):
        stopped = time.monotonic()
        stalled = probe.until(503, LIVE_S + POLL_S + SLACK_S + 5, "503 while the store is frozen")
        assert metrics_status(port) == 200, "/metrics answers whatever the loop does"
        hold = stopped + HOLD_S  # past the TTL: rounds fail or hang, and none is a turn
        wait_until(lambda: probe.ask() and time.monotonic() >= hold, HOLD_S + 10, "the hold")
        assert beat.alive(), beat.tail()
        thawed = time.monotonic()
    recovered = probe.until(200, 30, "200 again after SIGCONT")
    during = [status for at, status, _ in probe.answers if stalled <= at < thawed]
    assert set(during) == {503}, probe.changes(stopped)  # no 200 while frozen

    print(f"\n/healthz of beat-a, {lease_backend} lease (SIGSTOP at +0.00s):")
    print("\n".join(probe.changes(since=stopped)))
    print(f"SIGCONT at {thawed - stopped:+.2f}s")
    assert LIVE_S - 0.5 <= stalled - stopped <= LIVE_S + POLL_S + SLACK_S, probe.changes(stopped)
    assert recovered - thawed <= 30
    stalled_answers = [body for at, status, body in probe.answers if status == 503]
    assert all(body["last_turn_age_s"] > LIVE_S for body in stalled_answers)
    probe.until(200, 30, "beat-a to lead again", role="leader")
    assert beat.alive(), beat.tail()
    lines = beat.actions(Action.LOOP_STALLED.value)
    assert len(lines) == 2, lines  # the first 503, the first 200 after it: once each
    assert beat.stop() == 0, beat.tail()


def test_a_standby_beside_a_healthy_leader_answers_200_throughout(
    make_rig: Any,
    cluster_db: str,
    private_redis: str,
    lease_backend: str,
) -> None:
    rig = make_rig(
        cluster_db, private_redis, _lease(lease_backend, private_redis), every_second("s"), TTL
    )
    leader_port, standby_port = free_port(), free_port()
    leader = Probe(rig.beat("beat-a", metrics_port=leader_port, liveness_s=LIVE_S), leader_port)
    leader.until(200, 60, "beat-a to lead", role="leader")
    standby = Probe(rig.beat("beat-b", metrics_port=standby_port, liveness_s=LIVE_S), standby_port)
    standby.until(200, 60, "beat-b to answer as a standby", role="standby")

    window = 4 * LIVE_S  # several liveness periods
    started = time.monotonic()

    def watched() -> bool:
        for probe in (leader, standby):
            assert probe.ask() is not None, f"nothing answers on port {probe.port}"
        return time.monotonic() - started >= window

    wait_until(watched, window + 30, f"{window:g}s of answers")
    for probe, role in ((standby, "standby"), (leader, "leader")):
        seen = [(s, b["role"]) for at, s, b in probe.answers if at >= started]
        assert len(seen) >= window / 0.5, f"too few answers: {len(seen)}"
        assert set(seen) == {(200, role)}, probe.changes(started)
        ages = [b["last_turn_age_s"] for at, _, b in probe.answers if at >= started]
        assert max(ages) < LIVE_S, ages
    rig.assert_all_alive()
    assert not [b for b in rig.beats if b.actions(Action.LOOP_STALLED.value)]
    rig.stop_beats()
