"""The deadline on every wait for a server (``store/sql/watchdog.py``), the store URL's bound
(``engine.call_timeout``) and the broker's (``backends.bound_broker``), without a server: a
socket pair stands for a connection whose peer is frozen (it never answers, never closes)."""

from __future__ import annotations

import gc
import os
import socket
import threading
import time
import warnings
from collections.abc import Iterator

import pytest
from celery import Celery
from sqlalchemy import make_url

from celery_durable_beat.backends import BROKER_TIMEOUT_S, bound_broker
from celery_durable_beat.exceptions import InvalidArgument
from celery_durable_beat.store.sql.engine import (
    CALL_TIMEOUT_PARAM,
    PG_CALL_TIMEOUT_S,
    call_timeout,
    normalize_url,
    pg_connect_args,
)
from celery_durable_beat.store.sql.watchdog import (
    Watchdog,
    deadlines_off,
    shut_down,
    unbounded,
)

pytestmark = pytest.mark.unit

BOUND_S = 0.2
"""The waits' bound here; the watchdog looks every quarter of it."""


class FakeConnection:
    """A connection whose server never answers: one end of a socket pair, the other kept open
    and silent. ``wait`` blocks in ``recv`` with its deadline set, as ``BoundedConnection``'s
    wait does around psycopg's."""

    def __init__(self, watchdog: Watchdog) -> None:
        self.sock, self.peer = socket.socketpair()
        self.deadline: float | None = None
        self.interrupted = 0
        self.watchdog = watchdog
        watchdog.add(self, BOUND_S)

    def wait(self) -> bytes:
        self.deadline = time.monotonic() + BOUND_S
        try:
            return self.sock.recv(1)
        finally:
            self.deadline = None

    def interrupt(self) -> None:
        self.interrupted += 1
        shut_down(self.sock.fileno())

    def close(self) -> None:
        self.watchdog.discard(self)
        self.sock.close()
        self.peer.close()


@pytest.fixture
def watchdog() -> Watchdog:
    return Watchdog()


@pytest.fixture
def conn(watchdog: Watchdog) -> Iterator[FakeConnection]:
    made = FakeConnection(watchdog)
    yield made
    made.close()


def test_a_wait_past_its_deadline_ends_at_once_with_an_end_of_file(conn: FakeConnection) -> None:
    started = time.monotonic()
    assert conn.wait() == b""  # the peer never wrote: only the shutdown ends the read
    took = time.monotonic() - started
    assert BOUND_S <= took < BOUND_S * 1.25 + 0.5, took
    assert conn.interrupted == 1


def test_a_wait_that_returns_in_time_is_never_interrupted(conn: FakeConnection) -> None:
    for _ in range(3):
        conn.peer.send(b"x")
        assert conn.wait() == b"x"
    time.sleep(BOUND_S * 2)  # the watchdog looks several times meanwhile: nothing is waiting
    assert conn.interrupted == 0
    conn.peer.send(b"y")
    assert conn.wait() == b"y", "the socket still works"


def test_a_discarded_or_dropped_connection_is_forgotten(watchdog: Watchdog) -> None:
    first, second = FakeConnection(watchdog), FakeConnection(watchdog)
    assert watchdog.guarded() == 2
    first.close()
    assert watchdog.guarded() == 1
    sock, peer = second.sock, second.peer
    del second
    gc.collect()
    assert watchdog.guarded() == 0  # held weakly: a connection dropped unclosed goes too
    sock.close()
    peer.close()


def test_every_overdue_wait_is_interrupted_each_on_its_own_socket(watchdog: Watchdog) -> None:
    conns = [FakeConnection(watchdog) for _ in range(3)]
    try:
        conns[2].peer.send(b"z")
        answers: dict[int, bytes] = {}
        threads = [
            threading.Thread(target=lambda i=i: answers.__setitem__(i, conns[i].wait()))
            for i in range(3)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=5)
        assert answers == {0: b"", 1: b"", 2: b"z"}
        assert [c.interrupted for c in conns] == [1, 1, 0]
    finally:
        for c in conns:
            c.close()


def test_a_forked_child_starts_with_a_watchdog_of_its_own(
    watchdog: Watchdog, conn: FakeConnection
) -> None:
    with warnings.catch_warnings():  # 3.12+: forking beside threads; the child only exits
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: the parent's connections are not its to guard
        os._exit(0 if watchdog.guarded() == 0 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert watchdog.guarded() == 1


def test_unbounded_turns_deadlines_off_for_its_thread_only() -> None:
    seen: list[bool] = []
    with unbounded():
        assert deadlines_off()
        with unbounded():
            pass
        assert deadlines_off(), "an inner block leaves the outer one's state"
        other = threading.Thread(target=lambda: seen.append(deadlines_off()))
        other.start()
        other.join()
    assert seen == [False]
    assert not deadlines_off()


def test_shutting_down_a_closed_descriptor_is_harmless() -> None:
    left, right = socket.socketpair()
    fd = left.fileno()
    right.close()
    shut_down(fd)  # the peer is gone: nothing to end, no error
    assert left.recv(1) == b""
    left.close()


# -- the store URL's bound -------------------------------------------------------------------


def test_the_store_url_bound_defaults_and_is_taken_out_of_what_libpq_sees() -> None:
    url = make_url("postgresql+psycopg://u@h/db?connect_timeout=3")
    assert call_timeout(url) == (url, PG_CALL_TIMEOUT_S)
    own = make_url(f"postgresql+psycopg://u@h/db?{CALL_TIMEOUT_PARAM}=2.5&connect_timeout=3")
    stripped, bound = call_timeout(own)
    assert bound == 2.5
    assert dict(stripped.query) == {"connect_timeout": "3"}
    assert CALL_TIMEOUT_PARAM not in pg_connect_args(own)
    assert pg_connect_args(own)["connect_timeout"] == "3"
    assert call_timeout(make_url(f"postgresql+psycopg://u@h/db?{CALL_TIMEOUT_PARAM}=0"))[1] is None


def test_the_bound_applies_to_psycopg_3_only() -> None:
    for text in ("sqlite:///x.sqlite3", "postgresql+psycopg2://u@h/db", "postgresql+pg8000://h/d"):
        assert call_timeout(make_url(text))[1] is None, text


@pytest.mark.parametrize("value", ["soon", "-1", "nan"])
def test_a_bound_that_is_not_a_number_of_seconds_is_refused_when_the_url_is_read(
    value: str,
) -> None:
    with pytest.raises(InvalidArgument, match=CALL_TIMEOUT_PARAM):
        normalize_url(f"postgresql://u:s3cret@h/db?{CALL_TIMEOUT_PARAM}={value}")


# -- the broker's bound ----------------------------------------------------------------------


def _app(broker: str, **options: object) -> Celery:
    app = Celery("t", broker=broker, set_as_current=False)
    if options:
        app.conf.broker_transport_options = dict(options)
    return app


def test_beats_broker_connections_get_a_bound_on_each_wait() -> None:
    redis = _app("redis://127.0.0.1:6379/0", visibility_timeout=60)
    assert bound_broker(redis) == {
        "socket_timeout": BROKER_TIMEOUT_S,
        "socket_connect_timeout": BROKER_TIMEOUT_S,
    }
    assert redis.conf.broker_transport_options["visibility_timeout"] == 60
    amqp = _app("amqp://guest@127.0.0.1//")
    assert bound_broker(amqp) == {
        "read_timeout": BROKER_TIMEOUT_S,
        "write_timeout": BROKER_TIMEOUT_S,
    }
    assert bound_broker(_app("memory://")) == {}
    assert bound_broker(redis) == {}, "once is enough"


def test_what_the_user_set_for_the_broker_is_kept() -> None:
    mine = {"socket_timeout": None, "master_name": "m"}
    app = _app("sentinel://127.0.0.1:26379", **mine)
    assert bound_broker(app) == {}  # None: the user chose to wait; redis-py connects by it too
    assert app.conf.broker_transport_options == mine
    amqp = _app("amqp://guest@127.0.0.1//", read_timeout=30)
    assert bound_broker(amqp) == {"write_timeout": BROKER_TIMEOUT_S}
    assert amqp.conf.broker_transport_options["read_timeout"] == 30
