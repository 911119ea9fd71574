"""Generated ``beat_schedule`` entries through validation, a real store and every read surface.

SPEC §2 "Bounds": nothing that validation accepts may later fail a read. Each drawn entry
(``tests/support/entries.py``: every schedule form and extra key, names and values at and beyond
the bounds) goes through the one validation path (``translate_entry`` then ``validate_entry``,
with the app's defaults). A refused entry must be refused with ``ConfigError`` and its problems.
An accepted one is upserted through ``DurableBeat`` into PostgreSQL, run once by hand (so its
history has a record), and then ``list``, ``get`` (``show``), ``next_ticks``, ``history``,
``page`` and ``status``, the API's ``GET /api/v1/schedules``, ``GET /api/v1/schedules/{name}``
and its history, the console's table (``/`` and filtered by the name) and the schedule's page must
all answer: no exception, no 5xx, and the by-name reads show this schedule.

One database serves the whole module (created here, dropped at the end); the tables are emptied
after each example, so examples never see each other. The default run is derandomized (the same
150 examples everywhere, no example database); ``-m slow`` draws 3,000 random ones. The counts of
drawn, accepted and refused entries are printed and recorded as properties of the test.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from celery import Celery
from httpx import Client as Http
from sqlalchemy import create_engine

from celery_durable_beat import DurableBeat
from celery_durable_beat.celery_config import app_defaults, translate_entry
from celery_durable_beat.exceptions import ConfigError
from celery_durable_beat.publish.capturing import CapturingPublisher
from celery_durable_beat.schedules.validate import validate_entry
from celery_durable_beat.store.tables import audit, schedules
from celery_durable_beat.web import create_app
from tests.conftest import PG_ADMIN_URL
from tests.support.entries import count_cases
from tests.support.webserver import running

pytestmark = pytest.mark.integration

TOKEN = "admin-t0ken-0123456"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _dsn(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


@pytest.fixture(scope="module")
def module_pg_url() -> Iterator[str]:
    """One brand-new PostgreSQL database for the module's many examples, dropped afterwards."""
    name = f"dbt_fuzz_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_dsn(PG_ADMIN_URL), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')  # generated above, not user input
    yield f"{PG_ADMIN_URL.rpartition('/')[0]}/{name}"
    with psycopg.connect(_dsn(PG_ADMIN_URL), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def beat(module_pg_url: str) -> Iterator[DurableBeat]:
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(
        timezone="Europe/Berlin",
        durable_beat_url=module_pg_url,
        durable_beat_api_tokens={TOKEN: "admin"},
    )
    with DurableBeat(app, publisher=CapturingPublisher()) as control:
        control.migrate()
        yield control


class _Errors(logging.Handler):
    """The server's unhandled exceptions (uvicorn logs them), for the failure message."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(self.format(record))


SERVER_ERRORS = _Errors()


@pytest.fixture(scope="module")
def client(beat: DurableBeat) -> Iterator[Http]:
    """The app served by uvicorn as the HTTP API tests serve it, signed in to the console
    through its own form (whatever the session cookie holds)."""
    logger = logging.getLogger("uvicorn.error")
    with running(create_app(beat)) as http:
        logger.addHandler(SERVER_ERRORS)  # after uvicorn configured its loggers
        form = http.get("/login")
        csrf = re.search(r'name="csrf" value="([^"]*)"', form.text)
        assert csrf is not None, form.text
        signed_in = http.post(
            "/login", data={"token": TOKEN, "csrf": csrf.group(1)}, follow_redirects=False
        )
        assert signed_in.status_code == 303, signed_in.text
        yield http
    logger.removeHandler(SERVER_ERRORS)


def answered(http: Http, path: str, **kwargs: Any) -> Any:
    """GET ``path``; a 5xx fails with the server's traceback."""
    SERVER_ERRORS.seen.clear()
    answer = http.get(path, follow_redirects=False, **kwargs)
    assert answer.status_code < 500, (
        path,
        answer.status_code,
        answer.text[:300],
        SERVER_ERRORS.seen,
    )
    return answer


@pytest.fixture(scope="module")
def empty_tables(module_pg_url: str) -> Iterator[Callable[[], None]]:
    """Empties the schedules and their history between examples, whatever the product did."""
    engine = create_engine(module_pg_url)

    def empty() -> None:
        with engine.begin() as connection:
            connection.execute(audit.delete())
            connection.execute(schedules.delete())

    yield empty
    engine.dispose()


def path_of(name: str) -> str:
    """The name as one path segment: every reserved character and every dot escaped."""
    return quote(name, safe="").replace(".", "%2E")


def validated(beat: DurableBeat, name: str, entry: Any) -> bool:
    """Whether validation accepts the entry; a refusal must be a ConfigError with problems."""
    try:
        validate_entry(name, translate_entry(name, entry), app_defaults(beat.app, beat.settings))
    except ConfigError as exc:
        problems = exc.problems
    else:
        return True
    assert problems, "a ConfigError without problems"
    return False


def read_everywhere(beat: DurableBeat, http: Http, name: str) -> None:
    """Every read surface of one accepted schedule answers, and shows that schedule."""
    listed = [view.to_json() for view in beat.list()]
    assert [item["name"] for item in listed] == [name]
    json.dumps(listed, allow_nan=False)
    shown = beat.get(name, count=5).to_json()
    assert shown["name"] == name
    json.dumps(shown, allow_nan=False)
    beat.next_ticks(name, count=5)
    history = beat.history(name).to_json()
    assert history["events"], "the manual run left no record"
    json.dumps(history, allow_nan=False)
    assert [v.name for v in beat.page(name).schedules] == [name]
    beat.status()
    segment = path_of(name)
    for path, named in (
        ("/api/v1/schedules", False),
        (f"/api/v1/schedules/{segment}", True),
        (f"/api/v1/schedules/{segment}?count=100", True),
        (f"/api/v1/schedules/{segment}/enqueue-events", False),
    ):
        answer = answered(http, path, headers=AUTH)
        assert answer.status_code == 200, (path, answer.status_code, answer.text[:500])
        if named:
            assert answer.json()["name"] == name, path
    for path in ("/", f"/?q={quote(name, safe='')}", f"/schedules/{segment}"):
        answer = answered(http, path)
        assert answer.status_code == 200, (path, answer.status_code, answer.text[:500])


def check_cases(
    beat: DurableBeat,
    http: Http,
    empty: Callable[[], None],
    max_examples: int,
    derandomize: bool,
) -> Counter[str]:
    def accepted_and_read(name: str, entry: Any) -> bool:
        if not validated(beat, name, entry):
            return False
        empty()
        try:
            assert beat.upsert(name, entry).value == "created"
            beat.trigger(name, idempotency_key="fuzz")
            read_everywhere(beat, http, name)
        finally:
            empty()
        return True

    return count_cases(accepted_and_read, max_examples=max_examples, derandomize=derandomize)


def report(
    capsys: pytest.CaptureFixture[str],
    record_property: Callable[[str, object], None],
    what: str,
    counts: Counter[str],
) -> None:
    for key, value in counts.items():
        record_property(key, value)
    with capsys.disabled():
        print(f"\n{what}: {dict(counts)}")


def test_what_validation_accepts_every_read_surface_shows(
    beat: DurableBeat,
    client: Http,
    empty_tables: Callable[[], None],
    capsys: pytest.CaptureFixture[str],
    record_property: Callable[[str, object], None],
) -> None:
    counts = check_cases(beat, client, empty_tables, max_examples=150, derandomize=True)
    report(capsys, record_property, "definitions (derandomized)", counts)
    assert counts["accepted"] and counts["refused"]


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_what_validation_accepts_every_read_surface_shows_long(
    beat: DurableBeat,
    client: Http,
    empty_tables: Callable[[], None],
    capsys: pytest.CaptureFixture[str],
    record_property: Callable[[str, object], None],
) -> None:
    counts = check_cases(beat, client, empty_tables, max_examples=3000, derandomize=False)
    report(capsys, record_property, "definitions (random)", counts)
    assert counts["accepted"] and counts["refused"]
