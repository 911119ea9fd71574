"""A frozen server is an outage like any other (SPEC §7's last bullet, issue 41): no call waits
forever. Each server here is the test's own and is frozen with SIGSTOP (``tests/support/frozen.py``:
the kernel still ACKs and answers keepalives, nothing is read or answered), so only a deadline
on the client's side ends a call: the store's (``store/sql/watchdog.py``), the Redis lease's and
the broker's socket timeouts.

What each test proves, with bounds of about a second set through the settings a user would set:
the round fails with its real cause (``store_unavailable``, ``lease_unavailable``,
``broker_unavailable``) within the bound and is logged; beat fires again once the server is
continued, every tick enqueued once and none lost (a publish cut off by a frozen broker may
reach it twice, with one task id, which the worker guard runs once); ``durable-beat list``
prints one line and exits 5; ``serve`` answers 503 ``store_unavailable``. The time each took to
fail is printed (``-s``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from celery_durable_beat.backends import BROKER_TIMEOUT_S
from celery_durable_beat.model import Action
from tests.reliability.conftest import HaRig, every_second
from tests.support.frozen import frozen
from tests.support.procs import REPO, CeleryProcess, ThrowawayRedis, free_port, wait_until
from tests.support.rig import app_env, rig_factory
from tests.support.servers import ThrowawayPostgres, ThrowawayRabbit

pytestmark = pytest.mark.reliability

CALL_S = 1.0
"""``durable_beat_call_timeout`` of the store URL here: how long one exchange may wait."""
CONNECT_S = 2
"""libpq's ``connect_timeout`` here (psycopg, like libpq, takes no less than 2 s)."""
STORE_BOUND_S = CALL_S + 0.25 + CONNECT_S
"""A store call on a frozen server: its pooled connection's ping (the bound, plus the
watchdog's tick of a quarter of it), then one new connection that cannot log in."""
ROUND_GAP_S = 1.0
"""The next round after a freeze starts within this: the schedule is ``@every 1s``."""
SLACK_S = 3.0
"""Beyond a bound: the log line reaching its file, the poll, a loaded CI machine."""
TTL = 4.0
"""The lease TTL here: the Redis lease's calls wait a quarter of it (1 s), tried twice."""
LEASE_BOUND_S = 2 * max(0.5, min(5.0, TTL / 4))
BROKER_S = 1.0
"""``socket_timeout`` of the broker's transport options in the broker test."""
BROKER_BOUND_S = 4 * (BROKER_S + 0.2) + BROKER_S
"""A publish to a frozen Redis broker: Celery's publish retries (four attempts, 0.2 s apart),
each waiting one socket timeout, and the batch's delivery."""
FROZEN_APP = "tests.reliability.frozen_app"
TOKEN = "viewer-token-for-the-frozen-store-test-0123456789"


def bounded_url(url: str) -> str:
    return f"{url}?durable_beat_call_timeout={CALL_S:g}&connect_timeout={CONNECT_S}"


class FrozenRig(HaRig):
    """The HA rig, its processes on ``frozen_app`` (the test app plus ``BROKER_OPTIONS``)."""

    def _start(
        self,
        args: list[str],
        name: str,
        settings: Mapping[str, object],
        extra_env: Mapping[str, str] | None = None,
    ) -> CeleryProcess:
        env = {**self.env, **app_env(settings), **(extra_env or {})}
        proc = CeleryProcess(self.workdir, FROZEN_APP, args, env, f"{name}-{len(self.procs)}")
        self.procs.append(proc)
        return proc


@pytest.fixture
def make_frozen_rig(tmp_path: Path) -> Iterator[Any]:
    with rig_factory(tmp_path, FrozenRig) as make:
        yield make


@pytest.fixture
def cluster_db(cluster: ThrowawayPostgres) -> str:
    return cluster.create_database(f"dbt_{uuid.uuid4().hex[:16]}")


@pytest.fixture
def lease_redis() -> Iterator[ThrowawayRedis]:
    server = ThrowawayRedis()
    server.start()
    yield server
    server.close()


def time_to(proc: CeleryProcess, action: Action, since: float, bound: float) -> float:
    """Seconds from ``since`` until ``proc`` logged ``action``: at most the next round's start
    (``ROUND_GAP_S``) plus ``bound`` (its failing call), plus slack."""
    limit = ROUND_GAP_S + bound + SLACK_S
    wait_until(lambda: proc.actions(action.value), limit, action.value, interval=0.05)
    took = time.monotonic() - since
    print(f"\n{proc.name}: {action.value} {took:.2f} s after the freeze (call bound {bound:.2f} s)")
    return took


def assert_healthy(rig: HaRig, beat: CeleryProcess) -> None:
    assert beat.alive(), beat.tail()
    assert "Traceback" not in beat.output(), beat.tail()
    rig.stop_beats()


def _ticks_once(rig: HaRig) -> None:
    """Every tick of the schedule enqueued exactly once, with no gap (``missed: backfill``)."""
    ticks = sorted(r.tick_ms for r in rig.enqueued())
    assert len(ticks) == len(set(ticks)), "a tick enqueued twice"
    assert not sorted(set(range(ticks[0], ticks[-1] + 1, 1000)) - set(ticks)), "a tick lost"


def test_frozen_store_fails_the_round_in_time_and_beat_fires_after(
    make_rig: Any, cluster: ThrowawayPostgres, cluster_db: str, private_redis: str
) -> None:
    rig = make_rig(cluster_db, private_redis, None, every_second("s"), 30.0)
    beat = rig.beat("beat", store_url=bounded_url(cluster_db))
    rig.wait_leader()
    rig.wait_ticks(2)
    with frozen(cluster) as since:
        time_to(beat, Action.STORE_UNAVAILABLE, since, STORE_BOUND_S)
        rounds = len(beat.actions(Action.STORE_UNAVAILABLE.value))
        # Retried, each retry failing in time too (backoff 0.5 s doubling, a third of the TTL).
        wait_until(
            lambda: len(beat.actions(Action.STORE_UNAVAILABLE.value)) > rounds,
            2 * STORE_BOUND_S + SLACK_S,
            "a second failed round",
        )
    thawed_at = rig.store.now_ms()
    rig.wait_ticks(2, after_ms=thawed_at, timeout=20)
    assert_healthy(rig, beat)
    _ticks_once(rig)


def test_frozen_lease_redis_fails_the_round_as_lease_unavailable(
    make_rig: Any, pg_url: str, private_redis: str, lease_redis: ThrowawayRedis
) -> None:
    rig = make_rig(pg_url, private_redis, lease_redis.url, every_second("s"), TTL)
    beat = rig.beat("beat")
    rig.wait_leader()
    rig.wait_ticks(2)
    with frozen(lease_redis) as since:
        time_to(beat, Action.LEASE_UNAVAILABLE, since, LEASE_BOUND_S)
    thawed_at = rig.store.now_ms()
    rig.wait_ticks(2, after_ms=thawed_at, timeout=20)
    assert_healthy(rig, beat)
    _ticks_once(rig)


def test_frozen_broker_fails_the_round_as_broker_unavailable_and_loses_no_tick(
    make_frozen_rig: Any, pg_url: str
) -> None:
    broker = ThrowawayRedis()
    broker.start()
    try:
        rig = make_frozen_rig(pg_url, broker.url, None, every_second("s"), 30.0)
        rig.env["BROKER_OPTIONS"] = f'{{"socket_timeout": {BROKER_S}}}'
        beat = rig.beat("beat")
        rig.wait_leader()
        rig.wait_ticks(2)
        with frozen(broker) as since:
            time_to(beat, Action.BROKER_UNAVAILABLE, since, BROKER_BOUND_S)
        thawed_at = rig.store.now_ms()
        rig.wait_ticks(2, after_ms=thawed_at, timeout=30)
        assert_healthy(rig, beat)
        _ticks_once(rig)
        _broker_holds_each_tick(rig)
    finally:
        broker.close()


def _broker_holds_each_tick(rig: HaRig) -> None:
    """What the broker holds (no worker consumed it): every enqueued tick's message, nothing
    else; a task id twice only for a publish beat recorded as failed for the freeze (its bytes
    were in the frozen server's socket, which ran them when continued), published again with
    the same id, so the worker guard runs it once."""
    held = Counter(json.loads(raw)["headers"]["id"] for raw in rig.redis.lrange(rig.queue, 0, -1))
    enqueued = {r.task_id for r in rig.enqueued()}
    assert set(held) == enqueued, (sorted(set(held) ^ enqueued), rig.beats[0].tail())
    uncertain = {r.task_id for r in rig.records("failed") if r.reason == "broker_unavailable"}
    doubled = {task_id for task_id, n in held.items() if n > 1}
    print(f"broker: {sum(held.values())} messages, {len(held)} ticks, {len(doubled)} held twice")
    assert doubled <= uncertain, f"held twice without a failed publish: {doubled - uncertain}"
    assert all(n <= 2 for n in held.values()), held


def test_frozen_rabbitmq_fails_the_round_within_the_default_bound(
    make_frozen_rig: Any, pg_url: str
) -> None:
    """py-amqp waits for a frame forever unless ``read_timeout`` is set: without beat's default
    (``backends.bound_broker``) this beat did not log for the 120 s that were tried."""
    broker = ThrowawayRabbit()
    broker.start()
    try:
        rig = make_frozen_rig(pg_url, broker.url, None, every_second("s"), 30.0)
        beat = rig.beat("beat")
        rig.wait_leader()
        rig.wait_ticks(2)
        with frozen(broker) as since:
            time_to(beat, Action.BROKER_UNAVAILABLE, since, BROKER_TIMEOUT_S)
        thawed_at = rig.store.now_ms()
        rig.wait_ticks(2, after_ms=thawed_at, timeout=30)
        assert_healthy(rig, beat)
        _ticks_once(rig)
        assert rig.queued() >= len(rig.enqueued())  # each one the broker confirmed is there
    finally:
        broker.close()


def _celery(args: list[str], env: Mapping[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tests.support.procapp", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _env(store_url: str, **more: str) -> dict[str, str]:
    return {**os.environ, "BEAT_BROKER": "memory://", "DURABLE_BEAT_URL": store_url, **more}


def test_list_on_a_frozen_store_prints_one_line_and_exits_nonzero(
    cluster: ThrowawayPostgres, cluster_db: str
) -> None:
    url = bounded_url(cluster_db)
    before = _celery(["durable-beat", "list"], _env(url))
    assert before.communicate(timeout=60) and before.returncode == 0
    with frozen(cluster) as since:
        proc = _celery(["durable-beat", "list"], _env(url))
        _, err = proc.communicate(timeout=STORE_BOUND_S + SLACK_S + 10)
        took = time.monotonic() - since
    print(f"\nlist: exit {proc.returncode} {took:.2f} s after the freeze: {err.strip()}")
    assert proc.returncode == 5, err
    assert len(err.strip().splitlines()) == 1, err
    assert "store" in err and "Traceback" not in err, err
    assert took < STORE_BOUND_S + SLACK_S + 5  # the CLI's start (Celery, the app) included


def test_serve_answers_503_on_a_frozen_store_and_recovers(
    cluster: ThrowawayPostgres, cluster_db: str
) -> None:
    port = free_port()
    env = _env(bounded_url(cluster_db), DURABLE_BEAT_API_TOKENS=f"viewer:{TOKEN}")
    proc = _celery(["durable-beat", "serve", "--port", str(port)], env)
    base = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {TOKEN}"}

    def schedules() -> httpx.Response | None:
        assert proc.poll() is None, proc.communicate()
        try:
            return httpx.get(f"{base}/api/v1/schedules", headers=headers, timeout=30)
        except httpx.TransportError:
            return None

    try:
        wait_until(lambda: (r := schedules()) is not None and r.status_code == 200, 30, "serve")
        with frozen(cluster) as since:
            answer = schedules()
            took = time.monotonic() - since
            print(f"\nserve: {answer and answer.status_code} {took:.2f} s after the freeze")
            assert answer is not None and answer.status_code == 503, answer
            assert answer.json()["error"]["code"] == "store_unavailable"
            assert took < STORE_BOUND_S + SLACK_S
            health = httpx.get(f"{base}/healthz", timeout=30)
            assert health.status_code == 503
        wait_until(lambda: (r := schedules()) is not None and r.status_code == 200, 20, "200")
    finally:
        proc.terminate()
        proc.communicate(timeout=20)
