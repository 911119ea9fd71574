"""One-off ticks and exclusion dates (SPEC §15) through the user's surfaces, for real: the
CLI (``check``, ``next``, ``show``, ``list``) in subprocesses on PostgreSQL, a dispatch round on
the same store, and the HTTP API (PUT then GET, the views, 422s) over TCP on SQLite and
PostgreSQL. The pure rules are proven in ``tests/unit/test_oneoff_and_exclude.py``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from httpx import Client as Http

from celery_durable_beat import DurableBeat, tick_task_id
from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.publish.capturing import CapturingPublisher
from celery_durable_beat.web import create_app
from celery_durable_beat.web.schemas import ScheduleDetailOut
from tests.integration.test_cli import Project, make_project
from tests.support.webserver import running

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

LAUNCH = "2099-06-01T09:00:00+02:00"
LAUNCH_MS = int(datetime.fromisoformat(LAUNCH).timestamp() * 1000)
CONFIG = {
    "launch": {"task": "proj.launch", "schedule": f"@at {LAUNCH}"},
    "gone-by": {"task": "proj.launch", "schedule": "@at 2020-01-01T00:00:00+00:00"},
    "new-york-hourly": {
        "task": "proj.poll",
        "schedule": "0 * * * *",
        "tz": "America/New_York",
        "exclude": ["2026-03-08", {"from": "2026-12-24", "to": "2026-12-26"}],
    },
}


@pytest.fixture
def project(tmp_path: Path, pg_url: str) -> Iterator[Project]:
    yield from make_project(tmp_path, pg_url, beat_schedule=CONFIG)


def test_cli_check_next_show_and_a_round_agree_on_at_and_exclude(project: Project) -> None:
    assert project.ok_text("check").splitlines()[0] == "3 schedules OK"
    project.sync_config()
    project.sync_config()  # a second start: unchanged, no second record

    # already past when config sync first stored it: never fires, says so once
    gone = project.ok_json("history", "gone-by")["events"]
    assert [(e["outcome"], e["reason"], e["trigger"]) for e in gone] == [
        ("skipped", "missed", "auto")
    ]
    assert project.ok_json("show", "gone-by")["next_tick"] is None

    launch = project.ok_json("show", "launch")
    assert (launch["kind"], launch["schedule"]) == ("at", f"@at {LAUNCH}")
    assert launch["description"] == f"once, at {LAUNCH} (Europe/Berlin)"
    assert launch["next"] == [LAUNCH] and launch["next_tick"] == LAUNCH
    ticks = project.ok_json("next", "launch", "--count", "5")
    assert ticks == [
        {"tick_ms": LAUNCH_MS, "tick": LAUNCH, "task_id": "launch@2099-06-01T07:00:00Z"}
    ]
    assert "launch@2099-06-01T07:00:00Z" in project.ok_text("show", "launch")

    hourly = project.ok_json("show", "new-york-hourly", "--after", "2026-03-08T04:30:00Z")
    assert hourly["exclude"] == CONFIG["new-york-hourly"]["exclude"]
    assert hourly["description"].endswith(
        ", except on 2026-03-08, 2026-12-24 to 2026-12-26 (America/New_York)"
    )
    after = ("--after", "2026-03-08T04:30:00Z", "--count", "2")  # 23:30 EST on the 7th
    assert [t["tick"] for t in project.ok_json("next", "new-york-hourly", *after)] == [
        "2026-03-09T00:00:00-04:00",  # the whole spring-forward day is excluded
        "2026-03-09T01:00:00-04:00",
    ]

    # a round at the instant fires the one tick under its id; afterwards no next tick, listed
    assert _sent(project, LAUNCH_MS + 500)["launch"] == ["launch@2099-06-01T07:00:00Z"]
    assert "launch" not in _sent(project, LAUNCH_MS + 86_400_000)
    assert "gone-by" not in _sent(project, LAUNCH_MS + 86_400_000)
    listed = {s["name"]: s for s in project.ok_json("list")}
    assert listed["launch"]["next_tick"] is None and listed["launch"]["state"] == "active"
    (event,) = project.ok_json("history", "launch")["events"]
    assert (event["outcome"], event["task_id"]) == ("enqueued", tick_task_id("launch", LAUNCH_MS))
    later = ("--after", "2099-06-01T07:00:00Z")
    assert "no upcoming ticks" in project.ok_text("next", "launch", *later)
    assert project.ok_json("show", "launch", *later)["next"] == []


def _sent(project: Project, now_ms: int) -> dict[str, list[str]]:
    """One round at ``now_ms``: the task ids published, by schedule."""
    captured = CapturingPublisher()
    Dispatcher(project.store, captured, batch_size=100).run_round(now_ms, epoch=1)
    sent: dict[str, list[str]] = {}
    for message in captured.messages:
        sent.setdefault(message.schedule, []).append(message.task_id)
    return sent


def test_cli_check_refuses_a_bad_exclude_naming_schedule_field_and_fix(
    tmp_path: Path, pg_url: str
) -> None:
    bad = {
        "holidays": {"task": "t", "schedule": "@daily", "exclude": ["2026-12-32"]},
        "once": {"task": "t", "schedule": "@at 2026-12-24 18:00"},
    }
    for project in make_project(tmp_path, pg_url, beat_schedule=bad):
        done = project.cli("check")
        assert done.returncode == 2, done.stderr
        assert "schedule \"holidays\": exclude[0] '2026-12-32' is not a date" in done.stderr
        assert 'schedule "once": @at 2026-12-24T18:00:00 has no UTC offset' in done.stderr


# -- the HTTP API --------------------------------------------------------------------------------
TOKENS = {"admin-t0ken-0123456": "admin"}
ADMIN = {"Authorization": "Bearer admin-t0ken-0123456"}


@pytest.fixture
def client(store_url: str) -> Iterator[Http]:
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(
        timezone="Europe/Berlin", durable_beat_url=store_url, durable_beat_api_tokens=TOKENS
    )
    with DurableBeat(app) as control, running(create_app(control)) as http:
        yield http


def _put(client: Http, name: str, entry: dict[str, object]) -> dict[str, object]:
    answer = client.put(f"/api/v1/schedules/{name}", json=entry, headers=ADMIN)
    assert answer.status_code in (200, 201), answer.text
    body: dict[str, object] = answer.json()
    return body


def test_api_put_get_round_trips_at_and_exclude(client: Http) -> None:
    created = _put(client, "launch", {"task": "proj.launch", "schedule": f"@at {LAUNCH}"})
    assert created["status"] == "created"
    shown = client.get("/api/v1/schedules/launch", headers=ADMIN).json()
    ScheduleDetailOut.model_validate(shown)
    assert (shown["kind"], shown["schedule"], shown["next"]) == ("at", f"@at {LAUNCH}", [LAUNCH])
    again = {"task": shown["task"], "schedule": shown["schedule"]}
    assert _put(client, "launch", again)["status"] == "unchanged"  # what GET says, PUT takes

    # dates in a zone 14 hours ahead of UTC: three days there, from tomorrow, are excluded
    # (whichever side of midnight there the request falls: the range is fixed, the assertions
    # hold on both)
    kiritimati = ZoneInfo("Pacific/Kiritimati")
    today = datetime.now(kiritimati).date()
    excluded = [(today + timedelta(n)).isoformat() for n in (1, 2, 3)]
    holidays = [{"from": excluded[0], "to": excluded[-1]}]
    entry = {"task": "proj.t", "schedule": "0 9 * * *", "tz": "Pacific/Kiritimati"}
    _put(client, "kiri", {**entry, "exclude": holidays})
    got = client.get("/api/v1/schedules/kiri?count=3", headers=ADMIN).json()
    assert got["exclude"] == holidays and got["kind"] == "cron"
    days = [t[:10] for t in got["next"]]
    assert not set(days) & set(excluded), days
    assert (today + timedelta(4)).isoformat() in days[:2], days
    assert _put(client, "kiri", {**entry, "exclude": got["exclude"]})["status"] == "unchanged"
    assert _put(client, "kiri", entry)["status"] == "updated"  # dropping exclude is a change

    # an @at already past when created: no next tick, one skipped record (reason missed)
    past = _put(client, "late", {"task": "proj.t", "schedule": "@at 2020-01-01T00:00:00Z"})
    assert past["schedule"]["next_tick"] is None  # type: ignore[index]
    events = client.get("/api/v1/schedules/late/enqueue-events", headers=ADMIN).json()["events"]
    assert [(e["outcome"], e["reason"], e["tick_ms"]) for e in events] == [
        ("skipped", "missed", int(datetime(2020, 1, 1, tzinfo=timezone.utc).timestamp() * 1000))
    ]


def test_api_refuses_too_many_dates_and_exclude_on_an_at_with_422(client: Http) -> None:
    many = {"task": "t", "schedule": "@daily", "exclude": ["2030-01-01"] * 1001}
    answer = client.put("/api/v1/schedules/many", json=many, headers=ADMIN)
    assert answer.status_code == 422
    (problem,) = answer.json()["error"]["problems"]
    assert problem["field"] == "exclude"
    assert problem["problem"].startswith("exclude holds 1001 dates or ranges, more than 1000;")
    once = {"task": "t", "schedule": f"@at {LAUNCH}", "exclude": ["2099-06-01"]}
    answer = client.put("/api/v1/schedules/once", json=once, headers=ADMIN)
    assert answer.status_code == 422
    assert answer.json()["error"]["problems"][0]["problem"].startswith("an @at schedule")


def test_console_lists_a_one_off_with_its_kind_and_shows_excluded_dates(client: Http) -> None:
    _put(client, "launch", {"task": "proj.launch", "schedule": f"@at {LAUNCH}"})
    _put(client, "late", {"task": "proj.t", "schedule": "@at 2020-01-01T00:00:00Z"})
    holidays = ["2099-12-25", {"from": "2099-12-31", "to": "2100-01-01"}]
    _put(client, "daily", {"task": "proj.t", "schedule": "0 9 * * *", "exclude": holidays})
    form = client.get("/login").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', form)
    assert csrf is not None
    data = {"token": "admin-t0ken-0123456", "csrf": csrf.group(1)}
    listing = client.post("/login", data=data, follow_redirects=True)
    assert listing.status_code == 200, listing.text
    row = listing.text[listing.text.index('href="/schedules/launch"') :].split("</tr>")[0]
    assert 'title="a one-off: a single tick">once</span>' in row
    assert f"once, at {LAUNCH} (Europe/Berlin)" in row
    assert "2099-06-01 09:00 CEST" in row  # the next tick, in the schedule's zone
    page = client.get("/schedules/launch").text
    assert "one-off: a single tick" in page and "2099-06-01 09:00 CEST" in page
    late = client.get("/schedules/late").text
    assert "None: its one tick, 2020-01-01 01:00 CET, is past." in late
    daily = client.get("/schedules/daily").text
    assert "2099-12-25, 2099-12-31 to 2100-01-01" in daily
    assert "except on 2099-12-25, 2099-12-31 to 2100-01-01 (Europe/Berlin)" in daily
