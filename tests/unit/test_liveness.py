"""``/healthz`` (SPEC §17): what a turn of beat's loop is, and what the probe is answered.

The rule (``liveness.py``, ``beat_loop.py``'s docstring) on a manual clock: a real ``BeatLoop``
on the in-memory store and lease, observed by ``BeatMetrics``, whose ``Liveness`` is asked as the
probe's thread would ask it, between rounds and in the middle of one that does not return. The
same with real processes and a frozen PostgreSQL: ``tests/reliability/test_liveness.py``.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from celery import Celery
from prometheus_client import CollectorRegistry

from celery_durable_beat.beat_loop import BeatLoop
from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.exceptions import ConfigError, LeaseError, StoreUnavailable
from celery_durable_beat.leadership import RENEW_AFTER, Leadership
from celery_durable_beat.lease.base import LeaseStatus
from celery_durable_beat.liveness import DEFAULT_LIVENESS_S, Health, Liveness, beside
from celery_durable_beat.metrics import BeatMetrics
from celery_durable_beat.model import Action, Reason
from celery_durable_beat.publish.capturing import CapturingPublisher
from celery_durable_beat.schedules.validate import validate_entries
from celery_durable_beat.settings import LIVENESS_FLOOR_S, Settings
from celery_durable_beat.testing import MemoryLease, MemoryStore
from celery_durable_beat.wiring import make_observer

pytestmark = pytest.mark.unit

T0 = 1_780_000_000_000
LIVE_S = 3.0
"""A small ``durable_beat_liveness_s``, with the poll interval below, as the reliability tests."""
POLL_S = 0.5
ENTRIES = {"often": {"task": "proj.often", "schedule": "@every 1s"}}


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


class FlakyStore(MemoryStore):
    """A memory store whose round query fails with ``down``, or runs ``during`` inside it (a
    call that takes as long as the test says)."""

    down: Exception | None = None
    during: Callable[[], None] | None = None

    def clock_and_earliest_due(self) -> tuple[int, int | None]:
        if self.during is not None:
            self.during()
        if self.down is not None:
            raise self.down
        return super().clock_and_earliest_due()


class FlakyLease(MemoryLease):
    """The store's lease, or a lease backend that does not answer while ``down``."""

    down = False

    def acquire_or_renew(self) -> LeaseStatus:
        if self.down:
            raise LeaseError("the lease at redis://lease does not answer")
        return super().acquire_or_renew()


class Beat:
    """One beat process's loop and metrics on a shared store, and the scheduler's sleeps."""

    def __init__(self, store: FlakyStore, clock: ManualClock, holder: str) -> None:
        self.clock = clock
        self.publisher = CapturingPublisher()
        self.metrics = BeatMetrics(CollectorRegistry(), store=store, clock=clock, liveness_s=LIVE_S)
        self.lease = FlakyLease(store, 30, holder=holder)
        leadership = Leadership(self.lease, store, clock, poll_interval=POLL_S)
        self.loop = BeatLoop(
            store,
            Dispatcher(store, self.publisher, still_leader=leadership.still_leader),
            leadership,
            definitions=validate_entries(ENTRIES),
            history_keep=10,
            observer=self.metrics,
        )
        self.loop.prepare()

    def health(self) -> Health:
        return self.metrics.liveness.health()

    def turn(self) -> float:
        """One round, then the scheduler's sleep (what Celery's service does); the sleep."""
        delay = self.loop.round()
        self.clock.advance(delay)
        return delay


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store(clock: ManualClock) -> FlakyStore:
    return FlakyStore(clock=clock.now_ms)


@pytest.fixture
def leader(store: FlakyStore, clock: ManualClock) -> Beat:
    beat = Beat(store, clock, "beat-a")
    beat.turn()
    assert beat.loop.leadership.was_leader
    return beat


# -- the rule -----------------------------------------------------------------------------------
def test_200_within_the_window_503_past_it_and_the_planned_sleep_counts(
    clock: ManualClock,
) -> None:
    liveness = Liveness(LIVE_S, clock.monotonic)
    clock.advance(LIVE_S)
    assert liveness.health().live  # at the edge, still live
    clock.advance(0.01)
    assert not liveness.health().live  # nothing since the start: a first round that hangs
    liveness.turned(sleep=5.0)  # a loop that sleeps longer than the window between turns
    clock.advance(5.0 + LIVE_S)
    assert liveness.health().live
    clock.advance(0.01)
    health = liveness.health()
    assert not health.live and health.last_turn_age_s == pytest.approx(5.0 + LIVE_S + 0.01)
    liveness.turned(sleep=-1.0)  # never negative credit
    assert liveness.health() == Health(True, "standby", 0.0)


def test_the_answer_is_the_role_and_the_age_in_json(clock: ManualClock) -> None:
    liveness = Liveness(LIVE_S, clock.monotonic)
    liveness.standing(leader=True)
    clock.advance(1.23456)
    health = liveness.health()
    assert health.status == "200 OK"
    assert json.loads(health.body()) == {"role": "leader", "last_turn_age_s": 1.235}
    liveness.standing(leader=False)
    clock.advance(LIVE_S)
    assert liveness.health().status == "503 Service Unavailable"
    assert json.loads(liveness.health().body())["role"] == "standby"


def test_the_default_window_is_the_settings_floor() -> None:
    assert DEFAULT_LIVENESS_S == LIVENESS_FLOOR_S == 30.0


# -- what a turn is ---------------------------------------------------------------------------
def test_an_idle_leader_asleep_between_rounds_stays_200(leader: Beat) -> None:
    for _ in range(40):  # 20 s of rounds and sleeps: several windows
        delay = leader.turn()
        assert 0 < delay <= POLL_S
        health = leader.health()
        assert health.live and health.role == "leader" and health.last_turn_age_s == delay
    assert leader.publisher.messages  # it dispatched meanwhile


def test_a_standby_turns_on_every_lease_answer_held_by_another(
    leader: Beat, store: FlakyStore, clock: ManualClock
) -> None:
    standby = Beat(store, clock, "beat-b")
    for _ in range(40):
        leader.loop.round()
        standby.turn()
        health = standby.health()
        assert health.live and health.role == "standby"
    assert not standby.loop.leadership.was_leader


def test_a_leader_whose_store_fails_while_its_lease_answers_answers_503(
    leader: Beat, store: FlakyStore, clock: ManualClock
) -> None:
    store.down = StoreUnavailable("the durable beat store at postgresql://db failed: timeout")
    started = clock.mono
    while leader.health().live:
        leader.turn()  # backs off: no turn, whatever the lease says
        assert clock.mono - started <= LIVE_S + POLL_S, "still 200 past the window"
    health = leader.health()
    assert health.role == "leader" and leader.loop.leadership.was_leader  # it keeps the lease
    assert health.last_turn_age_s > LIVE_S
    store.down = None
    leader.turn()
    assert leader.health().live


def test_a_lease_that_does_not_answer_is_no_turn_for_a_standby_either(
    leader: Beat, store: FlakyStore, clock: ManualClock
) -> None:
    standby = Beat(store, clock, "beat-b")
    standby.turn()
    standby.lease.down = True
    while standby.health().live:
        standby.turn()
        assert standby.health().last_turn_age_s <= LIVE_S + POLL_S + 0.5
    standby.lease.down = False
    standby.turn()
    assert standby.health() == Health(True, "standby", standby.health().last_turn_age_s)


def test_a_broker_outage_is_no_turn(leader: Beat, clock: ManualClock) -> None:
    leader.publisher.fail_with = Reason.BROKER_UNAVAILABLE
    while leader.health().live:
        leader.turn()
    assert leader.loop.broker_down
    leader.publisher.fail_with = None
    leader.turn()
    assert leader.health().live


def test_a_round_fenced_out_by_a_newer_epoch_is_a_turn(
    leader: Beat, store: FlakyStore, clock: ManualClock
) -> None:
    clock.advance(1)  # something is due
    store.register_epoch(leader.loop.leadership.epoch + 1)  # a newer leader took over
    leader.turn()
    assert not leader.loop.leadership.was_leader  # fenced: the store answered, with a refusal
    assert leader.health() == Health(True, "standby", leader.health().last_turn_age_s)


def test_a_round_that_never_returns_answers_503_while_it_hangs(
    leader: Beat, store: FlakyStore, clock: ManualClock
) -> None:
    seen: list[Health] = []

    def hang() -> None:  # the probe asks while the round is stuck in the store's call
        store.during = None
        for _ in range(8):
            clock.advance(0.7)
            seen.append(leader.health())

    store.during = hang
    leader.loop.round()
    assert [h.live for h in seen] == [True] * 4 + [False] * 4  # past LIVE_S + the last sleep
    assert {h.role for h in seen} == {"leader"}
    store.during = None
    leader.turn()
    assert leader.health().live


def test_a_failing_turn_report_never_stops_a_round(
    leader: Beat, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*_: object) -> None:
        raise RuntimeError("liveness is broken")

    leader.metrics.turned = broken  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING):
        assert leader.loop.round() > 0
    assert [getattr(r, "action", None) for r in caplog.records] == [Action.METRICS_FAILED.value]


# -- the HTTP answer ----------------------------------------------------------------------------
def _call(app: Any, path: str, method: str = "GET") -> tuple[str, dict[str, str], bytes]:
    answered: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], *_: Any) -> Any:
        answered.update(status=status, headers=dict(headers))

    body = b"".join(app({"PATH_INFO": path, "REQUEST_METHOD": method}, start_response))
    return answered["status"], answered["headers"], body


def test_healthz_beside_the_metrics_app_and_each_stall_logged_once(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    liveness = Liveness(LIVE_S, clock.monotonic)

    def metrics(environ: Any, start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"metrics of " + environ["PATH_INFO"].encode()]

    app = beside(metrics, liveness)
    assert _call(app, "/metrics")[2] == b"metrics of /metrics"
    assert _call(app, "/")[2] == b"metrics of /"  # any other path, as prometheus-client's
    status, headers, body = _call(app, "/healthz")
    assert status == "200 OK" and headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"role": "standby", "last_turn_age_s": 0.0}
    assert headers["Cache-Control"] == "no-store"
    assert _call(app, "/healthz", "HEAD")[::2] == ("200 OK", b"")
    assert _call(app, "/healthz", "POST")[0] == "405 Method Not Allowed"

    caplog.set_level(logging.INFO, logger="celery_durable_beat")
    clock.advance(LIVE_S + 1)
    assert [_call(app, "/healthz")[0] for _ in range(3)] == ["503 Service Unavailable"] * 3
    liveness.turned(sleep=POLL_S)
    assert [_call(app, "/healthz")[0] for _ in range(2)] == ["200 OK"] * 2
    lines = [r for r in caplog.records if getattr(r, "action", None) == "loop_stalled"]
    assert [(r.levelno, r.stalled) for r in lines] == [  # type: ignore[attr-defined]
        (logging.WARNING, True),
        (logging.INFO, False),
    ]


@pytest.fixture
def served(store: FlakyStore, clock: ManualClock) -> Iterator[BeatMetrics]:
    metrics = BeatMetrics(
        CollectorRegistry(), store=store, clock=clock, port=0, addr="127.0.0.1", liveness_s=LIVE_S
    )
    metrics.start()
    yield metrics
    metrics.close()


def _get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()


def test_the_metrics_port_serves_healthz_and_metrics(
    served: BeatMetrics, clock: ManualClock
) -> None:
    port = served.server_port
    assert port
    served.standing(leader=True, epoch=4)
    status, body = _get(port, "/healthz")
    assert (status, json.loads(body)) == (200, {"role": "leader", "last_turn_age_s": 0.0})
    status, body = _get(port, "/metrics")
    assert status == 200 and b"durable_beat_leader 1.0" in body
    clock.advance(LIVE_S + 0.5)
    status, body = _get(port, "/healthz")
    assert (status, json.loads(body)) == (503, {"role": "leader", "last_turn_age_s": 3.5})
    assert _get(port, "/metrics")[0] == 200  # why a probe on /metrics would never notice


# -- durable_beat_liveness_s ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (Settings(), 30.0),  # 3 x max(1 s, 10 s) = 30, the floor
        (Settings(poll_interval=0.2, lease_ttl=5), 30.0),  # 3 x max(0.2, 1.67) = 5: the floor
        (Settings(poll_interval=20), 60.0),  # 3 x the poll interval
        (Settings(lease_ttl=120), 120.0),  # 3 x the renewal interval (40 s)
        (Settings(liveness_s=3), 3.0),  # as set, below the floor too
        (Settings(liveness_s=45.5, poll_interval=60), 45.5),
    ],
)
def test_liveness_s_is_as_set_else_three_of_the_longest_waits_at_least_30(
    settings: Settings, expected: float, clock: ManualClock
) -> None:
    renew = settings.lease_ttl * RENEW_AFTER
    assert settings.liveness_seconds(renew_every=renew) == pytest.approx(expected)
    given = {name: getattr(settings, name) for name in ("poll_interval", "lease_ttl", "liveness_s")}
    observer = make_observer(Settings(**given, metrics_port=9808), MemoryStore(), clock)
    assert isinstance(observer, BeatMetrics)  # what beat's /healthz is judged on
    assert observer.liveness.liveness_s == pytest.approx(expected)


class DjangoLike:
    def __init__(self, **settings: Any) -> None:
        self.__dict__.update(settings)


@pytest.mark.parametrize("value", [0, -1, "soon", float("nan")])
def test_a_bad_liveness_s_is_refused_naming_the_setting_as_written(value: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_conf({"durable_beat_liveness_s": value}, environ={})
    assert [p.field for p in caught.value.problems] == ["durable_beat_liveness_s"]
    app = Celery("names", set_as_current=False)
    app.config_from_object(DjangoLike(CELERY_DURABLE_BEAT_LIVENESS_S=value), namespace="CELERY")
    with pytest.raises(ConfigError) as caught:
        Settings.from_conf(app.conf, environ={})
    assert [p.field for p in caught.value.problems] == ["CELERY_DURABLE_BEAT_LIVENESS_S"]


def test_liveness_s_is_read_as_written_under_a_namespace() -> None:
    app = Celery("names", set_as_current=False)
    app.config_from_object(DjangoLike(CELERY_DURABLE_BEAT_LIVENESS_S="90"), namespace="CELERY")
    settings = Settings.from_conf(app.conf, environ={})
    assert settings.liveness_s == 90.0 and settings.liveness_seconds(renew_every=10) == 90.0
    assert Settings().liveness_s is None  # unset: the default is computed, never stored
