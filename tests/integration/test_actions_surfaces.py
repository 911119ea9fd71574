"""Who did what and backfill through the HTTP API and the CLI (SPEC §15), for real.

The API is served by uvicorn (``tests/support/webserver.py``) over a real store and the test
Redis as broker, whose queue shows what a backfill really sent; the CLI runs as a subprocess
(``celery -A proj durable-beat …``) on a PostgreSQL store. Tokens are configured both ways: one
with a name (``alice``), one as a bare role (named ``admin-<6 hex of its SHA-256>``).
"""

from __future__ import annotations

import getpass
import hashlib
import json
import socket
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from httpx import Client as Http

from celery_durable_beat import DurableBeat
from celery_durable_beat.clock import ms_to_datetime
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.web import create_app
from tests.integration.test_cli import Project, make_project, one_error_line
from tests.support.webserver import running

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

ALICE = "alice-t0ken-0123456"
ADMIN = "admin-t0ken-0123456"
VIEWER = "view-t0ken-0123456"
TOKENS: dict[str, Any] = {
    ALICE: {"role": "operator", "name": "alice"},
    ADMIN: "admin",
    VIEWER: "viewer",
}
ADMIN_NAME = "admin-" + hashlib.sha256(ADMIN.encode()).hexdigest()[:6]
PULSE = {"task": "proj.pulse", "schedule": "@every 30s"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def beat(store_url: str, redis_url: str) -> Iterator[DurableBeat]:
    app = Celery("proj", broker=redis_url, set_as_current=False)
    app.conf.update(timezone="UTC", durable_beat_url=store_url, durable_beat_api_tokens=TOKENS)
    with DurableBeat(app) as control:
        yield control


@pytest.fixture
def client(beat: DurableBeat) -> Iterator[Http]:
    with running(create_app(beat)) as http:
        yield http


def queued(beat: DurableBeat) -> list[dict[str, Any]]:
    raw = redis.Redis.from_url(beat.app.conf.broker_url).lrange("celery", 0, -1)
    return [json.loads(item) for item in raw]


def test_every_writing_endpoint_records_the_token_name_and_the_reason(client: Http) -> None:
    admin, alice = bearer(ADMIN), bearer(ALICE)
    body = {**PULSE, "reason": "new heartbeat"}
    assert client.put("/api/v1/schedules/pulse", json=body, headers=admin).status_code == 201
    paused = client.post(
        "/api/v1/schedules/pulse/pause", json={"reason": "vendor outage"}, headers=alice
    )
    assert paused.status_code == 200
    shown = client.get("/api/v1/schedules/pulse", headers=bearer(VIEWER)).json()
    assert shown["paused_by"]["actor"] == "alice"
    assert shown["paused_by"]["reason"] == "vendor outage"
    assert client.post("/api/v1/schedules/pulse/resume", headers=alice).status_code == 200
    sent = client.post("/api/v1/schedules/pulse/trigger", json={"reason": "smoke"}, headers=alice)
    assert sent.status_code == 201
    archived = client.post(
        "/api/v1/schedules/pulse/archive", json={"reason": "replaced"}, headers=admin
    )
    assert archived.status_code == 200
    deleted = client.request(
        "DELETE", "/api/v1/schedules/pulse", json={"reason": "gone"}, headers=admin
    )
    assert deleted.status_code == 204

    page = client.get("/api/v1/actions?schedule=pulse", headers=bearer(VIEWER)).json()
    assert [(a["actor"], a["action"], a["reason"]) for a in page["actions"]] == [
        (ADMIN_NAME, "delete", "gone"),
        (ADMIN_NAME, "archive", "replaced"),
        ("alice", "trigger", "smoke"),
        ("alice", "resume", None),
        ("alice", "pause", "vendor outage"),
        (ADMIN_NAME, "upsert", "new heartbeat"),
    ]
    assert page["next_cursor"] is None
    first = client.get("/api/v1/actions?limit=2", headers=bearer(VIEWER)).json()
    older = client.get(
        "/api/v1/actions",
        params={"limit": 5, "cursor": first["next_cursor"]},
        headers=bearer(VIEWER),
    ).json()
    assert [a["action"] for a in first["actions"] + older["actions"]] == [
        "delete", "archive", "trigger", "resume", "pause", "upsert",
    ]  # fmt: skip


def test_bad_reasons_and_roles_are_refused_with_the_field_named(client: Http) -> None:
    admin, alice = bearer(ADMIN), bearer(ALICE)
    assert client.put("/api/v1/schedules/pulse", json=PULSE, headers=admin).status_code == 201
    long = client.post("/api/v1/schedules/pulse/pause", json={"reason": "x" * 501}, headers=alice)
    assert long.status_code == 422
    assert [p["field"] for p in long.json()["error"]["problems"]] == ["reason"]
    control = client.post("/api/v1/schedules/pulse/pause", json={"reason": "a\nb"}, headers=alice)
    assert control.status_code == 422 and "control character" in control.text
    unknown = client.post("/api/v1/schedules/pulse/pause", json={"why": "x"}, headers=alice)
    assert unknown.status_code == 422
    assert client.get("/api/v1/schedules/pulse", headers=admin).json()["state"] == "active"
    window = {"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T00:01:00Z"}
    viewer = client.post("/api/v1/schedules/pulse/backfill", json=window, headers=bearer(VIEWER))
    assert viewer.status_code == 403
    assert client.get("/api/v1/actions", headers=bearer("nope" * 5)).status_code == 401


def test_backfill_over_http_sends_the_missing_ticks_under_their_automatic_ids(
    client: Http, beat: DurableBeat
) -> None:
    alice = bearer(ALICE)
    assert (
        client.put("/api/v1/schedules/pulse", json=PULSE, headers=bearer(ADMIN)).status_code == 201
    )
    now = ms_to_datetime(beat.store.now_ms())
    window = {
        "from": (now - timedelta(minutes=2)).isoformat(),
        "to": now.isoformat(),
        "reason": "INC-42",
    }
    path = "/api/v1/schedules/pulse/backfill"
    dry = client.post(path, json={**window, "dry_run": True}, headers=alice)
    assert dry.status_code == 200, dry.text
    planned = dry.json()
    assert planned["dry_run"] is True and planned["occurrences"] in (4, 5)
    assert queued(beat) == []
    done = client.post(path, json=window, headers=alice).json()
    assert done["ticks"] == planned["ticks"] and done["dry_run"] is False
    messages = queued(beat)[::-1]  # LPUSH: the oldest is last in the list
    assert [m["headers"]["id"] for m in messages] == [t["task_id"] for t in planned["ticks"]]
    assert {m["headers"]["periodic_trigger"] for m in messages} == {"backfill"}
    assert {m["headers"]["periodic_task_name"] for m in messages} == {"pulse"}
    assert all(tick_task_id("pulse", t["tick_ms"]) == t["task_id"] for t in planned["ticks"])
    again = client.post(path, json=window, headers=alice).json()
    assert (again["ticks"], again["already_enqueued"]) == ([], planned["occurrences"])
    assert len(queued(beat)) == len(messages)
    newest = client.get("/api/v1/actions?schedule=pulse&limit=1", headers=alice).json()
    assert newest["actions"][0] | {"at": None} == {
        "at": None,
        "actor": "alice",
        "action": "backfill",
        "schedule": "pulse",
        "reason": "INC-42",
    }

    for bad, field in (
        ({"to": window["to"]}, "from"),
        ({**window, "from": "yesterday"}, "from"),
        ({**window, "to": (now + timedelta(hours=1)).isoformat()}, "to"),
        ({"from": "2025-01-01T00:00:00Z", "to": window["to"]}, "to"),  # over 1,000
    ):
        refused = client.post(path, json=bad, headers=alice)
        assert refused.status_code == 422, (bad, refused.text)
        problems = refused.json()["error"].get("problems") or []
        assert field in [p["field"] for p in problems] or field in refused.text, refused.text


@pytest.fixture
def project(tmp_path: Path, pg_url: str) -> Iterator[Project]:
    yield from make_project(tmp_path, pg_url, beat_schedule={}, timezone="UTC")


def test_the_cli_backfills_and_lists_actions_as_its_user(project: Project) -> None:
    project.beat(actor="python:tester@here").upsert("pulse", PULSE, reason="set up")
    now = ms_to_datetime(project.store.now_ms())
    window = ["--from", (now - timedelta(minutes=1)).isoformat(), "--to", now.isoformat()]
    dry = project.ok_text("backfill", "pulse", *window, "--dry-run")
    assert "would send" in dry and "pulse: would send" in dry.splitlines()[-1]
    done = project.ok_json("backfill", "pulse", *window, "--reason", "downstream was down")
    assert done["dry_run"] is False and len(done["ticks"]) >= 2
    assert project.ok_json("backfill", "pulse", *window)["ticks"] == []
    project.ok_text("pause", "pulse", "--reason", "maintenance")
    listed = project.ok_json("actions", "pulse")
    me = f"cli:{getpass.getuser()}@{socket.gethostname()}"
    assert [(a["actor"], a["action"], a["reason"]) for a in listed["actions"]] == [
        (me, "pause", "maintenance"),
        (me, "backfill", "downstream was down"),
        ("python:tester@here", "upsert", "set up"),
    ]
    shown = project.ok_json("show", "pulse")
    assert shown["paused_by"]["actor"] == me and shown["paused_by"]["reason"] == "maintenance"
    text = project.ok_text("actions")
    assert text.splitlines()[0].split() == ["AT", "(UTC)", "ACTOR", "ACTION", "SCHEDULE", "REASON"]
    line = one_error_line(project.cli("resume", "pulse", "--reason", "x" * 501), 2)
    assert "reason has 501 characters" in line
    line = one_error_line(project.cli("backfill", "pulse", "--from", "noon", "--to", "now"), 2)
    assert "--from 'noon' is not an ISO 8601 instant" in line
    assert project.ok_json("show", "pulse")["state"] == "paused"
