"""Shared fixtures: the machine's real PostgreSQL and Redis, a fresh database per test.

URLs come from the environment (``.ci/run`` exports them after making sure the servers answer):
``DURABLE_BEAT_TEST_PG`` (an admin URL whose user may create databases) and
``DURABLE_BEAT_TEST_REDIS``. Integration tests never skip silently when a server is missing:
they fail, naming the URL they could not reach.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

PG_ADMIN_URL = os.environ.get(
    "DURABLE_BEAT_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("DURABLE_BEAT_TEST_REDIS", "redis://127.0.0.1:6379/0")


def _psycopg_dsn(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def _with_database(url: str, name: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A SQLAlchemy URL of a brand-new, empty PostgreSQL database, dropped afterwards."""
    import psycopg

    name = f"dbt_{uuid.uuid4().hex[:16]}"
    try:
        admin = psycopg.connect(_psycopg_dsn(PG_ADMIN_URL), autocommit=True)
    except psycopg.OperationalError as exc:  # pragma: no cover - environment problem
        pytest.fail(f"PostgreSQL at {PG_ADMIN_URL} does not answer: {exc}")
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')  # identifier generated above, not user input
    yield _with_database(PG_ADMIN_URL, name)
    with psycopg.connect(_psycopg_dsn(PG_ADMIN_URL), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def sqlite_url(tmp_path: os.PathLike[str]) -> str:
    """A SQLAlchemy URL of a new SQLite file in the test's temporary folder."""
    return f"sqlite:///{os.fspath(tmp_path)}/store.sqlite3"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest) -> str:
    """Both store backends, each a fresh empty database."""
    fixture = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(fixture))


@pytest.fixture
def redis_url() -> Iterator[str]:
    """The test Redis, flushed before and after (database chosen by DURABLE_BEAT_TEST_REDIS)."""
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.flushdb()
    except redis.ConnectionError as exc:  # pragma: no cover - environment problem
        pytest.fail(f"Redis at {REDIS_URL} does not answer: {exc}")
    yield REDIS_URL
    client.flushdb()
    client.close()
