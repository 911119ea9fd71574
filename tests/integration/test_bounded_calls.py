"""The deadline on each PostgreSQL exchange (``store/sql/bounded.py``) on a real server: a
statement that outlives ``durable_beat_call_timeout`` fails as ``StoreUnavailable`` in time, its
connection is discarded, the next call works, and a migration's block is exempt. The server
here is slow, not frozen (``pg_sleep``): what the client sees is the same, a wait with no
answer; the frozen servers are ``tests/reliability/test_frozen_servers.py``'s."""

from __future__ import annotations

import logging
import time

import psycopg
import pytest
from sqlalchemy import make_url, text

from celery_durable_beat.exceptions import StoreUnavailable
from celery_durable_beat.store.sql import SqlStore
from celery_durable_beat.store.sql.bounded import BoundedConnection
from celery_durable_beat.store.sql.engine import pg_connector
from celery_durable_beat.store.sql.watchdog import unbounded

pytestmark = pytest.mark.integration

BOUND_S = 0.4
SLOW = text("SELECT pg_sleep(5)")


def _bounded(url: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}durable_beat_call_timeout={BOUND_S:g}"


def test_a_statement_past_the_bound_fails_in_time_and_its_connection_is_replaced(
    pg_url: str,
) -> None:
    store = SqlStore(_bounded(pg_url))
    try:
        assert store.now_ms() > 0
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match=rf"did not answer within {BOUND_S:g} s"):
            store._read(lambda conn: conn.execute(SLOW))
        took = time.monotonic() - started
        assert BOUND_S <= took < BOUND_S * 1.25 + 1.0, took
        raw = store._get_engine().raw_connection()
        try:
            assert isinstance(raw.driver_connection, BoundedConnection)
            assert not raw.driver_connection.broken, "the broken one was not handed out again"
        finally:
            raw.close()
        assert store.now_ms() > 0
    finally:
        store.close()


def test_a_transaction_cut_off_mid_way_is_rolled_back_quietly(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The interrupted connection cannot roll back; SQLAlchemy must see it as disconnected
    (``Connection.broken``) and drop it, not log a failed reset with a traceback."""
    store = SqlStore(_bounded(pg_url))
    try:
        store.ensure_schema()
        with caplog.at_level(logging.WARNING), pytest.raises(StoreUnavailable):
            store._write(lambda conn: (conn.execute(text("SELECT 1")), conn.execute(SLOW)))
        assert [r.getMessage() for r in caplog.records if r.name.startswith("sqlalchemy")] == []
        assert store.now_ms() > 0
    finally:
        store.close()


def test_a_migration_may_run_past_the_bound(pg_url: str) -> None:
    store = SqlStore(_bounded(pg_url))
    try:
        with unbounded():
            store._read(lambda conn: conn.execute(text(f"SELECT pg_sleep({BOUND_S * 2})")))
        store.ensure_schema()
        store.migrate()  # under unbounded() itself
    finally:
        store.close()


def test_the_workers_direct_connections_are_bounded_too(pg_url: str) -> None:
    conn = pg_connector(make_url(_bounded(pg_url)))(autocommit=True)
    try:
        assert isinstance(conn, BoundedConnection)
        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError, match="did not answer"):
            conn.execute("SELECT pg_sleep(5)")
        assert time.monotonic() - started < BOUND_S * 1.25 + 1.0
        assert conn.broken
    finally:
        conn.close()


def test_a_url_without_a_bound_makes_plain_connections(pg_url: str) -> None:
    store = SqlStore(f"{pg_url}{'&' if '?' in pg_url else '?'}durable_beat_call_timeout=0")
    try:
        raw = store._get_engine().raw_connection()
        try:
            assert type(raw.driver_connection) is psycopg.Connection
        finally:
            raw.close()
    finally:
        store.close()
