"""The HTTP API (SPEC §9) through httpx against the real app, on real stores and a real broker.

The app is served by uvicorn on a free port (``tests/support/webserver.py``) and every request
crosses TCP, the real middleware, routing, auth and ``DurableBeat``; the store is SQLite or
PostgreSQL and the broker the test Redis, whose queue is read to see what a manual run really
sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
import redis
from celery import Celery
from httpx import Client as Http

from celery_durable_beat import DurableBeat
from celery_durable_beat.celery_config import definitions_from_app
from celery_durable_beat.control.views import (
    DETAIL_FIELDS,
    EVENT_FIELDS,
    LIST_FIELDS,
    ActionView,
)
from celery_durable_beat.sync import sync_definitions
from celery_durable_beat.web import create_app
from celery_durable_beat.web.auth import NoTokens
from celery_durable_beat.web.schemas import ActionOut, EventOut, ScheduleDetailOut, ScheduleOut
from tests.support.webserver import running

pytestmark = pytest.mark.integration

TOKENS = {
    "view-t0ken-0123456": "viewer",
    "oper-t0ken-0123456": "operator",
    "admin-t0ken-0123456": "admin",
}
CONFIG = {
    "nightly": {
        "task": "proj.report",
        "schedule": "0 3 * * *",
        "kwargs": {"api_password": "hunter2", "day": "x"},
    },
    "pulse": {"task": "proj.pulse", "schedule": "@every 30s"},
}


def auth(role: str) -> dict[str, str]:
    token = next(t for t, r in TOKENS.items() if r == role)
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def beat(store_url: str, redis_url: str) -> Iterator[DurableBeat]:
    app = Celery("proj", broker=redis_url, set_as_current=False)
    app.conf.update(
        timezone="Europe/Berlin",
        durable_beat_url=store_url,
        durable_beat_api_tokens=TOKENS,
        beat_schedule=CONFIG,
    )
    with DurableBeat(app) as control:
        store = control.store
        sync_definitions(store, definitions_from_app(app, control.settings), store.now_ms())
        yield control


@pytest.fixture
def client(beat: DurableBeat) -> Iterator[Http]:
    with running(create_app(beat)) as http:
        yield http


def queued(beat: DurableBeat) -> list[dict[str, Any]]:
    raw = redis.Redis.from_url(beat.app.conf.broker_url).lrange("celery", 0, -1)
    return [json.loads(item) for item in raw]


def test_no_token_or_an_unknown_one_is_401_and_a_query_token_is_ignored(
    client: Http,
) -> None:
    for headers, path in (
        ({}, "/api/v1/schedules"),
        ({"Authorization": "Bearer nope"}, "/api/v1/schedules"),
        ({"Authorization": "Basic dmlldy10MGtlbg=="}, "/api/v1/status"),
        ({}, "/api/v1/schedules?token=view-t0ken&access_token=view-t0ken"),
    ):
        answer = client.get(path, headers=headers)
        assert answer.status_code == 401, (headers, path)
        assert answer.headers["WWW-Authenticate"] == "Bearer"
        assert answer.json()["error"]["code"] == "unauthorized"


def test_roles_are_cumulative_and_each_refusal_is_403(client: Http) -> None:
    assert client.get("/api/v1/schedules", headers=auth("viewer")).status_code == 200
    for path in ("/api/v1/schedules/pulse/pause", "/api/v1/schedules/pulse/trigger"):
        refused = client.post(path, headers=auth("viewer"))
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert (
        client.post("/api/v1/schedules/pulse/archive", headers=auth("operator")).status_code == 403
    )
    entry = {"task": "proj.x", "schedule": "@every 1m"}
    assert (
        client.put("/api/v1/schedules/mine", json=entry, headers=auth("operator")).status_code
        == 403
    )
    assert client.delete("/api/v1/schedules/pulse", headers=auth("operator")).status_code == 403
    paused = client.post("/api/v1/schedules/pulse/pause", headers=auth("operator"))
    assert paused.status_code == 200 and paused.json()["state"] == "paused"
    resumed = client.post("/api/v1/schedules/pulse/resume", headers=auth("admin"))
    assert resumed.status_code == 200 and resumed.json()["state"] == "active"
    archived = client.post("/api/v1/schedules/pulse/archive", headers=auth("admin"))
    assert archived.status_code == 200 and archived.json()["state"] == "archived"


def test_reads_answer_exactly_what_the_cli_prints(client: Http, beat: DurableBeat) -> None:
    listed = client.get("/api/v1/schedules", headers=auth("viewer")).json()
    assert listed == [view.to_json() for view in beat.list()]
    assert [item["name"] for item in listed] == ["nightly", "pulse"]
    shown = client.get("/api/v1/schedules/nightly?count=3", headers=auth("viewer")).json()
    assert tuple(shown) == DETAIL_FIELDS and len(shown["next"]) == 3
    assert shown == beat.get("nightly", count=3).to_json()
    status = client.get("/api/v1/status", headers=auth("viewer")).json()
    assert status["counts"]["active"] == 2 and status["leader"] is None


def test_kwargs_are_redacted_in_the_api(client: Http) -> None:
    answer = client.get("/api/v1/schedules/nightly", headers=auth("admin"))
    assert answer.json()["kwargs"] == {"api_password": "***", "day": "x"}
    assert "hunter2" not in answer.text


def test_upsert_creates_then_is_unchanged_then_updates_and_delete_removes(
    client: Http,
) -> None:
    entry = {"task": "proj.mine", "schedule": "*/5 * * * *", "tz": "America/New_York"}
    created = client.put("/api/v1/schedules/mine", json=entry, headers=auth("admin"))
    assert created.status_code == 201
    assert created.json()["status"] == "created"
    assert tuple(created.json()["schedule"]) == LIST_FIELDS
    assert created.json()["schedule"]["source"] == "api"
    same = client.put("/api/v1/schedules/mine", json=entry, headers=auth("admin"))
    assert same.status_code == 200 and same.json()["status"] == "unchanged"
    changed = client.put(
        "/api/v1/schedules/mine", json={**entry, "schedule": "*/10 * * * *"}, headers=auth("admin")
    )
    assert changed.status_code == 200 and changed.json()["status"] == "updated"
    assert changed.json()["schedule"]["version"] == 2
    assert client.delete("/api/v1/schedules/mine", headers=auth("admin")).status_code == 204
    assert client.get("/api/v1/schedules/mine", headers=auth("admin")).status_code == 404


def test_config_owned_names_are_409(client: Http) -> None:
    entry = {"task": "proj.other", "schedule": "@every 1m"}
    put = client.put("/api/v1/schedules/NIGHTLY", json=entry, headers=auth("admin"))
    assert put.status_code == 409 and put.json()["error"]["code"] == "conflict"
    deleted = client.delete("/api/v1/schedules/nightly", headers=auth("admin"))
    assert deleted.status_code == 409 and "beat_schedule" in deleted.json()["error"]["message"]


def test_unknown_schedules_are_404_json(client: Http) -> None:
    for method, path in (
        ("GET", "/api/v1/schedules/ghost"),
        ("GET", "/api/v1/schedules/ghost/enqueue-events"),
        ("POST", "/api/v1/schedules/ghost/pause"),
        ("POST", "/api/v1/schedules/ghost/trigger"),
        ("DELETE", "/api/v1/schedules/ghost"),
    ):
        answer = client.request(method, path, headers=auth("admin"))
        assert answer.status_code == 404, (method, path)
        assert answer.json()["error"]["code"] == "not_found"
        assert "ghost" in answer.json()["error"]["message"]


def test_invalid_input_is_422_with_each_problem_and_its_field(client: Http) -> None:
    bad = {"task": "proj.x", "schedule": "61 * * * *", "tz": "Bogota", "missed": "sometimes"}
    answer = client.put("/api/v1/schedules/bad", json=bad, headers=auth("admin"))
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert error["code"] == "invalid"
    fields = {p["field"] for p in error["problems"]}
    assert {"schedule", "tz", "missed"} <= fields, error
    assert any("America/Bogota" in p["problem"] for p in error["problems"])
    not_object = client.put("/api/v1/schedules/bad", json=[1, 2], headers=auth("admin"))
    assert not_object.status_code == 422 and not_object.json()["error"]["problems"]
    for query in ("limit=0", "limit=101", "limit=x"):
        page = client.get(f"/api/v1/schedules/pulse/enqueue-events?{query}", headers=auth("viewer"))
        assert page.status_code == 422, query
        assert page.json()["error"]["problems"][0]["field"] == "query.limit"
    assert client.get("/api/v1/schedules/pulse?count=0", headers=auth("viewer")).status_code == 422
    kwargs = client.post(
        "/api/v1/schedules/pulse/trigger", json={"kwargs": [1]}, headers=auth("operator")
    )
    assert kwargs.status_code == 422


def test_a_body_over_one_mebibyte_is_413(client: Http) -> None:
    huge = {"task": "proj.x", "schedule": "@every 1m", "description": "x" * (1024 * 1024)}
    answer = client.put("/api/v1/schedules/huge", json=huge, headers=auth("admin"))
    assert answer.status_code == 413 and answer.json()["error"]["code"] == "too_large"
    assert client.get("/api/v1/schedules/huge", headers=auth("admin")).status_code == 404


def test_trigger_is_idempotent_by_key_and_really_sends_once(
    client: Http, beat: DurableBeat
) -> None:
    headers = {**auth("operator"), "Idempotency-Key": "deploy-42"}
    first = client.post(
        "/api/v1/schedules/nightly/trigger", json={"kwargs": {"day": "y"}}, headers=headers
    )
    assert first.status_code == 201 and first.json()["created"] is True
    again = client.post(
        "/api/v1/schedules/nightly/trigger", json={"kwargs": {"day": "y"}}, headers=headers
    )
    assert again.status_code == 200
    assert again.json() == {"task_id": first.json()["task_id"], "created": False}
    sent = queued(beat)
    assert [m["headers"]["id"] for m in sent] == [first.json()["task_id"]]
    events = client.get("/api/v1/schedules/nightly/enqueue-events", headers=auth("viewer")).json()
    assert [(e["trigger"], e["outcome"]) for e in events["events"]] == [("manual", "enqueued")]


def test_history_pages_with_a_cursor_newest_first(client: Http) -> None:
    ids = []
    for n in range(5):
        headers = {**auth("operator"), "Idempotency-Key": f"k{n}"}
        ids.append(
            client.post("/api/v1/schedules/pulse/trigger", headers=headers).json()["task_id"]
        )
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        query = "limit=2" + (f"&cursor={quote(cursor)}" if cursor else "")
        page = client.get(f"/api/v1/schedules/pulse/enqueue-events?{query}", headers=auth("viewer"))
        body = page.json()
        assert all(tuple(event) == EVENT_FIELDS for event in body["events"])
        seen += [event["task_id"] for event in body["events"]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert pages == 3 and seen == list(reversed(ids))
    bad = client.get("/api/v1/schedules/pulse/enqueue-events?cursor=zzz", headers=auth("viewer"))
    assert bad.status_code == 422


def test_names_with_spaces_slashes_and_unicode(client: Http) -> None:
    name = "reports/daily ünïcode & <b>"
    entry = {"task": "proj.x", "schedule": "@every 1h", "description": "<script>alert(1)</script>"}
    path = "/api/v1/schedules/" + quote(name, safe="")
    assert client.put(path, json=entry, headers=auth("admin")).status_code == 201
    shown = client.get(path, headers=auth("viewer"))
    assert shown.status_code == 200 and shown.json()["name"] == name
    paused = client.post(path + "/pause", headers=auth("operator"))
    assert paused.status_code == 200 and paused.json()["name"] == name
    events = client.get(path + "/enqueue-events", headers=auth("viewer"))
    assert events.status_code == 200


def test_openapi_document_describes_every_endpoint_with_the_views_fields(
    client: Http,
) -> None:
    doc = client.get("/api/v1/openapi.json").json()
    paths = doc["paths"]
    expected = {
        ("get", "/api/v1/schedules"),
        ("get", "/api/v1/status"),
        ("get", "/api/v1/schedules/{name}"),
        ("put", "/api/v1/schedules/{name}"),
        ("delete", "/api/v1/schedules/{name}"),
        ("post", "/api/v1/schedules/{name}/pause"),
        ("post", "/api/v1/schedules/{name}/resume"),
        ("post", "/api/v1/schedules/{name}/archive"),
        ("post", "/api/v1/schedules/{name}/trigger"),
        ("get", "/api/v1/schedules/{name}/enqueue-events"),
        ("post", "/api/v1/schedules/{name}/backfill"),  # SPEC §15
        ("get", "/api/v1/actions"),
    }
    found = {(method, path) for path, ops in paths.items() for method in ops}
    assert found == expected
    assert tuple(ScheduleOut.model_fields) == (*LIST_FIELDS, "invalid")  # invalid: when any
    detail = tuple(ScheduleDetailOut.model_fields)
    assert tuple(f for f in detail if f != "invalid") == DETAIL_FIELDS and "invalid" in detail
    assert tuple(EventOut.model_fields) == EVENT_FIELDS
    shown_action = ActionView(1, "2026-12-01T00:00:00Z", "alice", "pause", "x", None).to_json()
    assert tuple(ActionOut.model_fields) == tuple(shown_action)
    assert "HTTPBearer" in doc["components"]["securitySchemes"]


def test_healthz_needs_no_token_and_says_when_the_store_is_down(client: Http) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(
        durable_beat_url="postgresql+psycopg://postgres@127.0.0.1:1/none?connect_timeout=1",
        durable_beat_api_tokens=TOKENS,
    )
    with DurableBeat(app) as down, running(create_app(down)) as down_client:
        answer = down_client.get("/healthz")
        assert answer.status_code == 503 and answer.json()["status"] == "unavailable"


def test_no_token_configured_refuses_to_build_the_app(store_url: str) -> None:
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(durable_beat_url=store_url)
    with DurableBeat(app) as control, pytest.raises(NoTokens, match="durable_beat_api_tokens"):
        create_app(control)
