"""Shared fixtures: the machine's real PostgreSQL, Redis and RabbitMQ, a fresh database per test.

URLs come from the environment (``.ci/run`` exports them after making sure the servers answer):
``DURABLE_BEAT_TEST_PG`` (an admin URL whose user may create databases),
``DURABLE_BEAT_TEST_REDIS`` and ``DURABLE_BEAT_TEST_AMQP``. Integration tests never skip
silently when a server is missing: they fail, naming the URL they could not reach.

``scripts/check`` runs the suite on two pytest-xdist workers (``-n 2 --dist loadgroup``). Each
worker flushes a Redis database of its own (``DURABLE_BEAT_TEST_REDIS``'s, plus the worker's
number); the ``reliability`` tests (all under ``tests/reliability/``) run one after another on
one worker (group ``processes``, formed by ``pytest_xdist_make_scheduler`` below), so their
timing-sensitive kills and handovers never overlap each other, while the unit and integration
tests run on the other, which the group's worker joins once the group is done. Both share one
chaos seed, drawn by the controller.

Tests marked ``docker`` (tests/docker, pytest-celery containers) need a Docker engine: without
one they are deselected, not skipped, and the run says so in one line (scripts/check-containers,
the last stage of scripts/check, runs them on a Docker engine it starts). Celery's own pytest
fixtures (``celery.contrib.pytest``: an in-process ``celery_app`` / ``celery_worker``) are loaded
for every test; pytest-celery's plugin is not (see pyproject.toml).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

pytest_plugins = ("celery.contrib.pytest",)

DOCKER_DESELECTED = pytest.StashKey[str]()

PG_ADMIN_URL = os.environ.get(
    "DURABLE_BEAT_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def _worker_redis(url: str) -> str:
    """Under pytest-xdist, worker ``gwN`` takes the database N after the configured one."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return url
    parts = urlsplit(url)
    db = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{(db + int(worker[2:])) % 16}"))


REDIS_URL = _worker_redis(os.environ.get("DURABLE_BEAT_TEST_REDIS", "redis://127.0.0.1:6379/0"))
AMQP_URL = os.environ.get("DURABLE_BEAT_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672//")


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


@pytest.fixture
def amqp_url() -> str:
    """The test RabbitMQ. Tests share its virtual host: each uses queues of its own names."""
    from kombu import Connection
    from kombu.exceptions import OperationalError

    with Connection(AMQP_URL, connect_timeout=3) as conn:
        try:
            conn.ensure_connection(max_retries=1)
        except (OperationalError, OSError) as exc:  # pragma: no cover - environment problem
            pytest.fail(f"RabbitMQ at {AMQP_URL} does not answer: {exc!r}")
    return AMQP_URL


# -- stores: one way to build each backend, for every test that needs one ----------------------
STORE_BACKENDS = ("sqlite", "postgresql", "memory")
SQL_BACKENDS = ("sqlite", "postgresql")


@pytest.fixture
def leader_epoch() -> int:
    """The fencing epoch the store fixtures register (0: none). Override it in a test module
    whose tests write as a leader, e.g. ``@pytest.fixture def leader_epoch(): return 1``."""
    return 0


def _open(kind: str, request: pytest.FixtureRequest, leader_epoch: int) -> Iterator[Any]:
    from tests.support.stores import open_store

    fixture = {"sqlite": "sqlite_url", "postgresql": "pg_url"}.get(kind)
    url = None if fixture is None else str(request.getfixturevalue(fixture))
    store = open_store(kind, url)
    if leader_epoch:
        store.register_epoch(leader_epoch)
    yield store
    store.close()


@pytest.fixture(params=STORE_BACKENDS)
def store(request: pytest.FixtureRequest, leader_epoch: int) -> Iterator[Any]:
    """Every store backend, fresh and empty: SQLite, PostgreSQL and the in-memory store."""
    yield from _open(request.param, request, leader_epoch)


@pytest.fixture(params=SQL_BACKENDS)
def sql_store(request: pytest.FixtureRequest, leader_epoch: int) -> Iterator[Any]:
    """The SQL store on SQLite and on PostgreSQL, fresh and empty."""
    yield from _open(request.param, request, leader_epoch)


@pytest.fixture
def pg_store(request: pytest.FixtureRequest, leader_epoch: int) -> Iterator[Any]:
    """The SQL store on a fresh PostgreSQL database."""
    yield from _open("postgresql", request, leader_epoch)


@pytest.fixture
def memory_store(request: pytest.FixtureRequest, leader_epoch: int) -> Iterator[Any]:
    """The in-memory store (``celery_durable_beat.testing.MemoryStore``), host clock."""
    yield from _open("memory", request, leader_epoch)


def _hypothesis_prints_failing_examples() -> None:
    """Undo schemathesis' global patch of Hypothesis' printer (tests/integration/
    test_schemathesis_api.py). Importing schemathesis (its pytest plugin loads it in every run)
    swaps ``hypothesis.core.RepresentationPrinter`` for one that prints nothing, to speed up its
    own huge schemas: every Hypothesis test of the suite would then report a failing example as
    ``check(name=, entry=)``. Its patch is applied once (flagged), so it is applied here first and
    then undone; the larger buffer it sets is kept."""
    try:
        from schemathesis.generation.hypothesis import setup
    except ImportError:  # pragma: no cover - the dev extra installs it
        return
    import hypothesis.core
    from hypothesis.vendor import pretty

    setup()
    hypothesis.core.RepresentationPrinter = pretty.RepresentationPrinter  # type: ignore[misc]


def pytest_configure(config: pytest.Config) -> None:
    """The controller draws the chaos seed before it starts xdist workers, which inherit it."""
    _hypothesis_prints_failing_examples()
    if "PYTEST_XDIST_WORKER" not in os.environ:
        from tests.support.chaos import SEED

        os.environ.setdefault("DURABLE_BEAT_CHAOS_SEED", str(SEED))


# -- collection: reliability tests grouped for xdist; docker tests deselected without an engine
RELIABILITY_DIR = "tests/reliability/"
"""Where every test marked ``reliability`` lives: the xdist controller groups them by this path."""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` with the ``reliability`` tests in one work unit, ``processes``.

    xdist groups by an ``@group`` suffix its workers append to the test ids of items marked
    ``xdist_group``; under pytest 9.2 that suffix is silently lost (the id moved to
    ``Node._id``), so a marker alone groups nothing and the reliability tests ran on both workers
    at once. The controller sees only test ids, so it groups them by their folder (every
    reliability test is under ``tests/reliability/``: collection fails otherwise). The largest
    unit is handed out first, so the group starts at once on one worker while the other takes
    the rest, one test at a time, and the group's worker joins it when the group is done.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class ReliabilityGroupScheduling(LoadGroupScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(RELIABILITY_DIR):
                return "processes"
            return str(super()._split_scope(nodeid))

    return ReliabilityGroupScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    misplaced = [
        item.nodeid
        for item in items
        if item.get_closest_marker("reliability") and not item.nodeid.startswith(RELIABILITY_DIR)
    ]
    if misplaced:
        raise pytest.UsageError(
            f"tests marked reliability must live under {RELIABILITY_DIR} (xdist groups them by "
            f"that folder): {misplaced}"
        )
    docker_items = [item for item in items if item.get_closest_marker("docker")]
    if not docker_items:
        return
    from tests.support.docker_engine import engine_problem

    problem = engine_problem()
    if problem is None:
        return
    items[:] = [item for item in items if not item.get_closest_marker("docker")]
    config.hook.pytest_deselected(items=docker_items)
    config.stash[DOCKER_DESELECTED] = (
        f"docker: {len(docker_items)} tests deselected: {problem}; "
        "scripts/check-containers runs them on an engine of its own (a stage of scripts/check)"
    )


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> list[str]:
    lines = [config.stash[DOCKER_DESELECTED]] if DOCKER_DESELECTED in config.stash else []
    if any(item.get_closest_marker("chaos") for item in items):
        from tests.support.chaos import header

        lines.append(header())  # the seed, so a failing run can be replayed
    return lines


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Under xdist the workers collect, and their collection report is not shown: the controller
    says the same here, without the count."""
    if not getattr(config.option, "numprocesses", None):
        return []
    from tests.support.chaos import header
    from tests.support.docker_engine import engine_problem

    lines = []
    problem = engine_problem()
    if problem is not None:
        lines.append(
            f"docker: tests marked docker are deselected: {problem}; "
            "scripts/check-containers runs them on an engine of its own (a stage of scripts/check)"
        )
    return [*lines, header()]
