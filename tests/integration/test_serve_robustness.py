"""``serve`` never answers 500, keeps one reading of every path, stays up through a store outage,
and signs the console in with a real session (SPEC §9 "Robustness of serve", issue #26).

Most tests run the app under uvicorn in a thread (``tests/support/webserver.py``) over a SQLite
store; the outage and the proxy tests run ``celery -A proj durable-beat serve`` as a process,
its PostgreSQL behind ``tests/support/faultproxy.py`` so the store can be down at start and come
back while the process runs.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from celery import Celery
from httpx import Client as Http

from celery_durable_beat import DurableBeat
from celery_durable_beat.celery_config import definitions_from_app
from celery_durable_beat.exceptions import InvalidArgument
from celery_durable_beat.model import Source
from celery_durable_beat.sync import sync_definitions
from celery_durable_beat.web import create_app
from celery_durable_beat.web.auth import COOKIE
from celery_durable_beat.web.session import SignInThrottle
from tests.integration.test_cli import make_project, write_project
from tests.support.faultproxy import FaultProxy
from tests.support.procs import wait_until
from tests.support.webserver import free_port, running

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

VIEWER, OPERATOR, ADMIN = "viewer-token-0123456789", "operator-token-012345", "admin-token-0123456"
TOKENS = {VIEWER: "viewer", OPERATOR: "operator", ADMIN: "admin"}
SECURITY = ("Content-Security-Policy", "X-Content-Type-Options", "X-Frame-Options")
CONFIG = {"nightly": {"task": "proj.report", "schedule": "0 3 * * *", "kwargs": {"day": "x"}}}
NEWLINE = "line\nbreak"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def jar(cookies: dict[str, str]) -> dict[str, str]:
    """Cookies sent as a header: each request says exactly which it carries."""
    return {"Cookie": "; ".join(f"{name}={value}" for name, value in cookies.items())}


def stateless(http: Http) -> Http:
    """A client that keeps no cookie between requests (httpx's jar would resend them)."""
    http.event_hooks["response"].append(lambda _answer: http.cookies.clear())
    return http


@pytest.fixture
def beat(sqlite_url: str, redis_url: str) -> Iterator[DurableBeat]:
    app = Celery("proj", broker=redis_url, set_as_current=False)
    app.conf.update(durable_beat_url=sqlite_url, durable_beat_api_tokens=TOKENS)
    app.conf.beat_schedule = CONFIG
    with DurableBeat(app) as control:
        store = control.store
        definitions = definitions_from_app(app, control.settings)
        sync_definitions(store, definitions, store.now_ms())
        odd = dataclasses.replace(definitions[0], name=NEWLINE)  # as an older version kept it
        store.upsert(odd, Source.API, None, store.now_ms())
        yield control


@pytest.fixture
def client(beat: DurableBeat) -> Iterator[Http]:
    with running(create_app(beat)) as http:
        yield stateless(http)


def refused(answer: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The answer is ``status`` in the ``{"error"}`` shape with ``code`` and the headers."""
    assert answer.status_code == status, (answer.status_code, answer.text)
    body = answer.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    for header in SECURITY:
        assert header in answer.headers, (header, answer.headers)
    return dict(body["error"])


# -- 1. error shapes --------------------------------------------------------------------------
def test_unknown_routes_wrong_methods_and_bad_bodies_answer_in_our_shape(client: Http) -> None:
    refused(client.get("/api/v1/nope", headers=bearer(VIEWER)), 404, "not_found")
    refused(client.get("/no/such/page"), 404, "not_found")
    wrong = client.patch("/api/v1/schedules/nightly", headers=bearer(ADMIN))
    refused(wrong, 405, "method_not_allowed")
    assert wrong.headers["Allow"] == "DELETE, GET, PUT"
    put = "/api/v1/schedules/fresh"
    headers = {**bearer(ADMIN), "Content-Type": "application/json"}
    refused(client.put(put, content=b"{not json", headers=headers), 400, "invalid")
    refused(client.put(put, content=b'{"task": "\xff"}', headers=headers), 400, "invalid")
    refused(client.put(put, content=b"x" * (1024 * 1024 + 1), headers=headers), 413, "too_large")
    assert client.get("/healthz").headers["X-Frame-Options"] == "DENY"


def test_the_caller_is_judged_before_the_body(client: Http) -> None:
    headers = {"Content-Type": "application/json"}
    for body in (b"{not json", b"[1, 2]", b"\xff"):
        refused(
            client.put("/api/v1/schedules/x", content=body, headers=headers), 401, "unauthorized"
        )
        viewer = {**headers, **bearer(VIEWER)}
        refused(client.put("/api/v1/schedules/x", content=body, headers=viewer), 403, "forbidden")
        answer = client.post("/api/v1/schedules/nightly/trigger", content=body, headers=headers)
        refused(answer, 401, "unauthorized")


# -- 2. one reading of every path -------------------------------------------------------------
def test_a_path_ending_in_an_action_is_that_action_never_a_name(client: Http) -> None:
    entry = {"task": "proj.digest", "schedule": "0 4 * * *"}
    answer = client.put("/api/v1/schedules/nightly/pause", json=entry, headers=bearer(ADMIN))
    refused(answer, 405, "method_not_allowed")
    assert answer.headers["Allow"] == "POST"
    for suffix in ("resume", "trigger", "archive"):
        gone = client.delete(f"/api/v1/schedules/nightly/{suffix}", headers=bearer(ADMIN))
        assert gone.headers["Allow"] == "POST", suffix
    wrong = client.put("/api/v1/schedules/x/enqueue-events", json=entry, headers=bearer(ADMIN))
    assert wrong.status_code == 405 and wrong.headers["Allow"] == "GET"
    names = [s["name"] for s in client.get("/api/v1/schedules", headers=bearer(VIEWER)).json()]
    assert not any("/" in name for name in names), names
    history = client.get("/api/v1/schedules/nightly/enqueue-events", headers=bearer(VIEWER))
    assert history.status_code == 200 and "events" in history.json()


def test_a_name_with_a_newline_can_be_shown_and_paused(client: Http) -> None:
    path = "/api/v1/schedules/line%0Abreak"
    shown = client.get(path, headers=bearer(VIEWER))
    assert shown.status_code == 200 and shown.json()["name"] == NEWLINE
    paused = client.post(path + "/pause", headers=bearer(OPERATOR))
    assert paused.status_code == 200 and paused.json()["state"] == "paused"
    session = sign_in(client, OPERATOR)
    page = client.get("/schedules/line%0Abreak", headers=jar(session))
    assert page.status_code == 200 and "paused" in page.text


# -- 3. tampering -----------------------------------------------------------------------------
def test_a_nul_in_a_name_or_filter_is_refused_not_a_failure(client: Http) -> None:
    refused(client.get("/api/v1/schedules/a%00b", headers=bearer(VIEWER)), 404, "not_found")
    refused(client.post("/api/v1/schedules/a%00b/pause", headers=bearer(ADMIN)), 404, "not_found")
    session = sign_in(client, VIEWER)
    assert client.get("/", params={"q": "a\x00"}, headers=jar(session)).status_code == 200


def test_a_huge_page_number_shows_the_last_page(client: Http) -> None:
    session = sign_in(client, VIEWER)
    for page in (str(10**20), str(-(10**20)), "0"):
        answer = client.get("/", params={"page": page}, headers=jar(session))
        assert answer.status_code == 200 and "nightly" in answer.text, page


def test_a_non_ascii_csrf_value_is_refused_not_a_failure(client: Http) -> None:
    form = client.get("/login")
    answer = client.post(
        "/login",
        data={"token": VIEWER, "csrf": "ünï"},
        headers=jar({"durable_beat_login": form.cookies["durable_beat_login"]}),
    )
    assert answer.status_code == 403 and "expired" in answer.text
    session = sign_in(client, OPERATOR)
    acted = client.post("/schedules/nightly/pause", data={"csrf": "ünï"}, headers=jar(session))
    refused(acted, 403, "forbidden")
    out = client.post("/logout", data={"csrf": "ünï"}, headers=jar(session))
    refused(out, 403, "forbidden")


# -- 5. the session ---------------------------------------------------------------------------
def sign_in(client: Http, token: str, headers: dict[str, str] | None = None) -> dict[str, str]:
    """Sign in through the form; the session cookie, as a mapping to send back."""
    answer = sign_in_answer(client, token, headers)
    assert answer.status_code == 303, answer.text
    return {COOKIE: answer.cookies[COOKIE]}


def sign_in_answer(
    client: Http, token: str, headers: dict[str, str] | None = None
) -> httpx.Response:
    form = client.get("/login", headers=headers)
    nonce = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert nonce is not None, form.text
    return client.post(
        "/login",
        data={"token": token, "csrf": nonce.group(1)},
        headers={
            **(headers or {}),
            **jar({"durable_beat_login": form.cookies["durable_beat_login"]}),
        },
    )


def csrf_of(client: Http, session: dict[str, str]) -> str:
    page = client.get("/", headers=jar(session))
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None, page.text
    return found.group(1)


def test_the_cookie_is_an_expiring_session_never_the_token(client: Http) -> None:
    answer = sign_in_answer(client, OPERATOR)
    set_cookie = answer.headers["set-cookie"]
    assert OPERATOR not in set_cookie and "HttpOnly" in set_cookie
    assert "Max-Age=43200" in set_cookie and "samesite=strict" in set_cookie.lower()
    assert "Secure" not in set_cookie  # plain HTTP, no trusted proxy
    page = client.get("/", headers=jar({COOKIE: answer.cookies[COOKIE]}))
    assert page.status_code == 200 and page.headers["Cache-Control"] == "no-store"
    assert (
        client.get("/", headers=jar({COOKIE: OPERATOR})).status_code == 303
    )  # a token: no session


def test_sign_out_ends_the_session_on_the_server_and_sign_in_rotates_csrf(client: Http) -> None:
    first = sign_in(client, OPERATOR)
    second = sign_in(client, OPERATOR)
    assert first != second and csrf_of(client, first) != csrf_of(client, second)
    out = client.post("/logout", data={"csrf": csrf_of(client, first)}, headers=jar(first))
    assert out.status_code == 303
    replayed = client.get("/", headers=jar(first))
    assert replayed.status_code == 303 and replayed.headers["location"] == "/login"
    assert client.get("/", headers=jar(second)).status_code == 200  # only that session ended


def test_failed_sign_ins_are_slowed_per_address_with_429(beat: DurableBeat) -> None:
    app = create_app(beat)
    # A stopped clock: the 1 s wait after the sixth failure never runs out while this test
    # signs in, however slow the machine (the waits' lengths are unit-tested on a fake clock).
    app.state.throttle = SignInThrottle(clock=lambda: 1_000.0)
    with running(app) as http:
        check_throttled(stateless(http))


def check_throttled(client: Http) -> None:
    statuses = [sign_in_answer(client, "wrong-token-0123456789").status_code for _ in range(7)]
    assert statuses[:6] == [401] * 6 and statuses[6] == 429, statuses
    late = sign_in_answer(client, OPERATOR)  # even the right token waits: no guessing meanwhile
    assert late.status_code == 429 and int(late.headers["Retry-After"]) >= 1


# -- 6. small ones ----------------------------------------------------------------------------
def test_an_idempotency_key_reused_with_another_body_is_422(
    client: Http, beat: DurableBeat
) -> None:
    headers = {**bearer(OPERATOR), "Idempotency-Key": "deploy-7"}
    path = "/api/v1/schedules/nightly/trigger"
    first = client.post(path, json={"kwargs": {"day": "y", "n": 1}}, headers=headers)
    assert first.status_code == 201
    replay = client.post(path, json={"kwargs": {"n": 1, "day": "y"}}, headers=headers)
    assert replay.status_code == 200 and replay.json()["task_id"] == first.json()["task_id"]
    other = {"kwargs": {"day": "z", "n": 1}}
    body = refused(client.post(path, json=other, headers=headers), 422, "invalid")
    assert [p["field"] for p in body["problems"]] == ["kwargs"]
    # The first body is kept with the run in the store: a second serve process (or one
    # restarted) over the same store refuses the reuse too, and the CLI's trigger as well.
    with running(create_app(beat)) as again:
        refused(stateless(again).post(path, json=other, headers=headers), 422, "invalid")
    with pytest.raises(InvalidArgument, match="idempotency key"):
        beat.trigger("nightly", kwargs={"day": "z", "n": 1}, idempotency_key="deploy-7")


def test_a_short_token_is_refused_naming_the_setting(beat: DurableBeat) -> None:
    from celery_durable_beat.web.auth import ShortToken

    with pytest.raises(ShortToken, match="durable_beat_api_tokens"):
        create_app(beat, tokens={"x": "admin"})  # type: ignore[dict-item]


def test_a_dsn_in_kwargs_is_shown_without_its_password(client: Http) -> None:
    entry = {
        "task": "proj.copy",
        "schedule": "@every 1h",
        "kwargs": {"dsn": "postgresql://u:pw1@h/db"},
    }
    assert (
        client.put("/api/v1/schedules/copy", json=entry, headers=bearer(ADMIN)).status_code == 201
    )
    shown = client.get("/api/v1/schedules/copy", headers=bearer(VIEWER)).json()
    assert shown["kwargs"]["dsn"] == "postgresql://u:***@h/db"


# -- 4. a store outage, and a proxy, with serve as a process ----------------------------------
def start_serve(folder: Path, *extra: str) -> tuple[subprocess.Popen[bytes], str, Path]:
    port = free_port()
    log = folder / "serve.log"
    env = {**os.environ, "PYTHONPATH": str(folder)}
    env.pop("DURABLE_BEAT_URL", None)
    env.pop("DURABLE_BEAT_API_TOKENS", None)
    command = [sys.executable, "-m", "celery", "-A", "proj", "durable-beat", "serve"]
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*command, "--port", str(port), *extra],
            cwd=folder,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return proc, f"http://127.0.0.1:{port}", log


def health(url: str, proc: subprocess.Popen[bytes]) -> int:
    """``/healthz``'s status, 0 while nothing listens; fails if serve exited."""
    assert proc.poll() is None, "serve exited"
    try:
        return httpx.get(url + "/healthz", timeout=5).status_code
    except httpx.TransportError:
        return 0


@pytest.fixture
def proxy(pg_url: str) -> Iterator[FaultProxy]:
    found = FaultProxy.for_url(pg_url)
    yield found
    found.close()


def test_serve_starts_without_its_store_answers_503_and_recovers(
    tmp_path: Path, pg_url: str, proxy: FaultProxy
) -> None:
    proxy.drop()  # the database is not there when serve starts
    write_project(tmp_path, proxy.url(pg_url), beat_schedule=CONFIG, durable_beat_api_tokens=TOKENS)
    proc, url, log = start_serve(tmp_path)
    try:
        wait_until(lambda: health(url, proc) == 503, timeout=30, what="serve to answer 503")
        with stateless(Http(base_url=url, timeout=10)) as http:
            down = http.get("/healthz").json()
            assert down["error"]["code"] == "store_unavailable"
            refused(http.get("/api/v1/schedules", headers=bearer(VIEWER)), 503, "store_unavailable")
            session = sign_in(http, VIEWER)  # signing in needs no store
            refused(http.get("/", headers=jar(session)), 503, "store_unavailable")
            proxy.pass_()
            wait_until(lambda: health(url, proc) == 200, timeout=30, what="serve to recover")
            answer = http.get("/api/v1/schedules", headers=bearer(VIEWER))
            assert answer.status_code == 200, answer.text
            assert http.get("/", headers=jar(session)).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    text = log.read_text()
    assert "store unavailable at start" in text and "Traceback" not in text, text


def test_the_cookie_is_secure_behind_a_named_https_proxy_only(tmp_path: Path, pg_url: str) -> None:
    write_project(tmp_path, pg_url, beat_schedule=CONFIG, durable_beat_api_tokens=TOKENS)
    https = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"}
    for extra, secure in ((("--forwarded-allow-ips", "127.0.0.1"), True), ((), False)):
        proc, url, _log = start_serve(tmp_path, *extra)
        try:
            wait_until(lambda: health(url, proc) == 200, timeout=30, what="serve to start")  # noqa: B023 (called here)
            with stateless(Http(base_url=url, timeout=10)) as http:
                answer = sign_in_answer(http, VIEWER, headers=https)
            assert answer.status_code == 303, answer.text
            assert ("Secure" in answer.headers["set-cookie"]) is secure, (extra, answer.headers)
        finally:
            proc.terminate()
            proc.wait(timeout=20)


def test_serve_refuses_a_short_token_with_one_line(tmp_path: Path, sqlite_url: str) -> None:
    project = next(make_project(tmp_path, sqlite_url, durable_beat_api_tokens={"short": "admin"}))
    done = project.cli_process("serve", "--port", "1")
    project.store.close()
    assert done.returncode == 2, done.stderr
    assert "durable_beat_api_tokens" in done.stderr and "16" in done.stderr
    assert "short" not in done.stderr.replace("shorter", "") and "Traceback" not in done.stderr
