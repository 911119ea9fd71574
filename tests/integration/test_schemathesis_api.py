"""schemathesis against the served OpenAPI document (SPEC §9: no input makes ``serve`` answer 500).

The document is read from the app itself (``/api/v1/openapi.json``) and every operation is called
with generated requests, positive and negative, through schemathesis' in-process ASGI client,
each with the admin token, so every authenticated path runs. Every check schemathesis has is on
(its default: all built-in checks enabled, e.g. ``not_a_server_error``,
``status_code_conformance``, ``content_type_conformance``, ``response_schema_conformance``,
``response_headers_conformance``, ``negative_data_rejection``, ``positive_data_acceptance``,
``ignored_auth``, ``unsupported_method``): a 5xx or an answer that does not match the document
fails the test. Schedules are seeded first (config-owned and API ones, names with ``/`` and
unicode), so reads by name also hit real rows; writes by the fuzzer are undone before each case.

The default run is derandomized at 25 examples per operation; ``-m slow`` draws 500 random ones
per operation. The number of cases run is printed and recorded as a property of the test.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import schemathesis
from celery import Celery
from hypothesis import HealthCheck, settings
from sqlalchemy import create_engine

from celery_durable_beat import DurableBeat
from celery_durable_beat.celery_config import definitions_from_app
from celery_durable_beat.publish.capturing import CapturingPublisher
from celery_durable_beat.store.tables import audit, schedules
from celery_durable_beat.sync import sync_definitions
from celery_durable_beat.web import create_app
from tests.conftest import PG_ADMIN_URL

pytestmark = pytest.mark.integration

TOKEN = "admin-t0ken-0123456"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CONFIG = {
    "nightly": {"task": "proj.report", "schedule": "0 3 * * *", "kwargs": {"api_password": "x"}},
    "pulse": {"task": "proj.pulse", "schedule": "@every 30s"},
}
SEEDED = {
    "api-one": {"task": "proj.api", "schedule": "*/5 * * * *", "tz": "America/New_York"},
    "team/reports": {"task": "proj.r", "schedule": 60, "description": "a / in the name"},
    "日本": {"task": "proj.jp", "schedule": "CRON_TZ=Asia/Tokyo 0 9 * * 1-5"},
}
CASES: Counter[str] = Counter()


def _dsn(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


# The schema is loaded at import, from the app itself, and each operation is one test driven by
# Hypothesis here rather than schemathesis' ``parametrize``: its lazy ``from_fixture`` reads
# ``Function._nodeid``, which pytest 9.2 no longer has, and its per-operation subtests are not
# reported through pytest-xdist (a failing run passed under ``-n 2``). Nothing here touches the
# database: the store is built on first use, after the ``beat`` fixture has created it.
DB_NAME = f"dbt_st_{uuid.uuid4().hex[:12]}"
APP = Celery("proj", broker="memory://", set_as_current=False)
APP.conf.update(
    timezone="Europe/Berlin",
    durable_beat_url=f"{PG_ADMIN_URL.rpartition('/')[0]}/{DB_NAME}",
    durable_beat_api_tokens={TOKEN: "admin"},
    beat_schedule=CONFIG,
)
BEAT = DurableBeat(APP, publisher=CapturingPublisher())
# Every check stays on. Four operations take values whose validity the document cannot state: a
# schedule definition (a cron expression, a zone, SPEC §2's bounds are checked by validation,
# not by a JSON schema), a history or actions cursor (opaque: only one the listing gave out is
# valid) and a backfill window (instants, in the past, at most 1,000 occurrences: SPEC §15). For
# those, 422 ``invalid`` is an expected answer to schema-valid data; the answer must still
# match the document (status, shape, headers) like every other.
_ACCEPTED = ["2xx", "401", "403", "404", "409", "422", "429"]
CONFIG_TOML = "\n".join(
    f'[[operations]]\ninclude-name = "{name}"\n'
    f"checks.positive_data_acceptance.expected-statuses = {_ACCEPTED!r}\n"
    for name in (
        "PUT /api/v1/schedules/{name}",
        "GET /api/v1/schedules/{name}/enqueue-events",
        "GET /api/v1/actions",
        "POST /api/v1/schedules/{name}/backfill",
    )
)
schema = schemathesis.openapi.from_asgi(
    "/api/v1/openapi.json",
    create_app(BEAT),
    config=schemathesis.config.SchemathesisConfig.from_str(CONFIG_TOML),
)


@pytest.fixture(scope="module")
def beat() -> Iterator[DurableBeat]:
    """``BEAT`` on a brand-new PostgreSQL database, dropped afterwards."""
    with psycopg.connect(_dsn(PG_ADMIN_URL), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{DB_NAME}"')  # generated above, not user input
    BEAT.migrate()
    yield BEAT
    BEAT.close()
    with psycopg.connect(_dsn(PG_ADMIN_URL), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')


@pytest.fixture(scope="module")
def seed(beat: DurableBeat) -> Iterator[Callable[[], None]]:
    """Puts the seeded schedules back as they were (the fuzzer pauses, archives, deletes)."""
    engine = create_engine(APP.conf.durable_beat_url)
    store = beat.store

    def reseed() -> None:
        with engine.begin() as connection:
            connection.execute(audit.delete())
            connection.execute(schedules.delete())
        sync_definitions(store, definitions_from_app(beat.app, beat.settings), store.now_ms())
        for name, entry in SEEDED.items():
            beat.upsert(name, entry)
            beat.trigger(name, idempotency_key="seed")

    yield reseed
    engine.dispose()


OPERATIONS = {op.label: op for op in (result.ok() for result in schema.get_all_operations())}
_HEALTH = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]


def run_operation(
    label: str, seed: Callable[[], None], max_examples: int, derandomize: bool
) -> None:
    """Every phase schemathesis' own ``parametrize`` runs (examples, coverage: unexpected
    methods, missing headers, edge values; then positive and negative fuzzing), built by the
    builder it uses for each operation, so the run is the same and reported by plain pytest."""
    from schemathesis.generation.feedback import FeedbackSources
    from schemathesis.pytest._test_builder import build_operation_test

    def check(case: Any) -> None:
        seed()
        CASES[label] += 1
        case.call_and_validate(headers=AUTH)

    test = build_operation_test(
        config=schema.config,
        operation=OPERATIONS[label],
        test_func=check,
        given_kwargs={},
        feedback=FeedbackSources(),
        explicit_settings=settings(
            max_examples=max_examples,
            derandomize=derandomize,
            database=None,
            deadline=None,
            suppress_health_check=_HEALTH,
        ),
    )
    test()


@pytest.mark.parametrize("label", sorted(OPERATIONS))
def test_operation_answers_as_documented(label: str, seed: Callable[[], None]) -> None:
    run_operation(label, seed, max_examples=25, derandomize=True)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("label", sorted(OPERATIONS))
def test_operation_answers_as_documented_long(label: str, seed: Callable[[], None]) -> None:
    run_operation(label, seed, max_examples=500, derandomize=False)


def test_cases_were_run(
    capsys: pytest.CaptureFixture[str], record_property: Callable[[str, object], None]
) -> None:
    """The count of cases run by the tests above in this process (partial when some of them
    ran on another xdist worker or were deselected: this one only reports)."""
    record_property("schemathesis_cases", sum(CASES.values()))
    with capsys.disabled():
        print(f"\nschemathesis cases: {sum(CASES.values())} {dict(CASES)}")
