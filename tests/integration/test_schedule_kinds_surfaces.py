"""The schedule kinds of SPEC §18 through the user's surfaces, for real: an app module on disk
declaring a Celery ``solar``, an ``@solar`` string, an RRULE, a cron ``L`` and a custom schedule
class; ``check``, ``next``, ``show`` and ``list`` through Celery's own CLI on PostgreSQL; a
dispatch round on the same store; the HTTP API (``PUT`` with a solar and an rrule string) and
the console over TCP. The instants are held against references computed here: PyEphem,
python-dateutil and dates written out by hand."""

from __future__ import annotations

import importlib
import re
import sys
import textwrap
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import ephem
import pytest
from celery import Celery
from dateutil.rrule import rrulestr
from httpx import Client as Http

from celery_durable_beat import DurableBeat, tick_task_id
from celery_durable_beat.store.sql import SqlStore
from celery_durable_beat.web import create_app
from tests.integration.test_cli import Project
from tests.support.webserver import running

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

BERLIN = ZoneInfo("Europe/Berlin")
AFTER = "2026-12-04T00:00:00Z"
AFTER_DT = datetime(2026, 12, 4, tzinfo=timezone.utc)
LAST_FRIDAY = "RRULE:FREQ=MONTHLY;BYDAY=-1FR;BYHOUR=9;BYMINUTE=0;BYSECOND=0"

PROJECT = '''\
from datetime import datetime, timedelta, timezone

from celery import Celery
from celery.schedules import BaseSchedule, solar


class EveryOtherHour(BaseSchedule):
    """At minute ``minute`` of every even UTC hour: a team's own schedule class."""

    def __init__(self, minute=15):
        super().__init__()
        self.minute = minute

    def next_after(self, instant):
        at = instant.astimezone(timezone.utc).replace(minute=self.minute, second=0, microsecond=0)
        while at <= instant or at.hour % 2:
            at += timedelta(hours=1)
        return at

    def __repr__(self):
        return f"EveryOtherHour(minute={{self.minute}})"


app = Celery("proj", broker="memory://", set_as_current=False)
app.conf.update(
    timezone="Europe/Berlin",
    durable_beat_url={url!r},
    broker_connection_retry_on_startup=False,
    beat_schedule={{
        "tallinn-sunset": {{"task": "proj.lights", "schedule": solar("sunset", 59.437, 24.745)}},
        "tallinn-sunrise": {{
            "task": "proj.lights",
            "schedule": "@solar sunrise 59.437 24.745",
            "tz": "Europe/Tallinn",
            "exclude": ["2026-12-25"],
        }},
        "last-friday": {{"task": "proj.report", "schedule": {rule!r}}},
        "month-end": {{"task": "proj.close", "schedule": "0 9 L * *"}},
        "even-hours": {{
            "task": "proj.poll",
            "schedule": EveryOtherHour(15),
            "start_at": "2026-12-04T04:00:00Z",
        }},
    }},
)
'''


def _sun(event: str, after: datetime, count: int) -> list[datetime]:
    """PyEphem's own instants, set up as Celery's ``solar`` sets it up, truncated to the
    second; each searched from just after the last one."""
    observer = ephem.Observer()
    observer.lat, observer.lon, observer.elev, observer.pressure = "59.437", "24.745", 0, 0
    observer.horizon = "-0:34"
    method = observer.next_setting if event == "sunset" else observer.next_rising
    found: list[datetime] = []
    start = after
    while len(found) < count:
        moment = method(ephem.Sun(), start=ephem.Date(start)).datetime()
        found.append(moment.replace(tzinfo=timezone.utc))
        start = moment + timedelta(hours=1)
    return found


def _agree(shown: list[str], reference: list[datetime]) -> None:
    """Each tick is PyEphem's instant truncated to the second. PyEphem's own answer moves by a
    few hundredths of a second with where its search starts (the engine searches from fixed
    anchors, this reference from just after the last event), so an event that close to a whole
    second may truncate to the neighbouring one (tests/unit/test_solar.py pins that down)."""
    assert len(shown) == len(reference)
    for text, exact in zip(shown, reference, strict=True):
        lead = (exact - datetime.fromisoformat(text)).total_seconds()
        near_boundary = abs(lead - round(lead)) < 0.1
        assert 0 <= lead < 1 or (near_boundary and -0.1 < lead < 1.1), (text, exact)


@pytest.fixture
def project(tmp_path: Path, pg_url: str) -> Iterator[Project]:
    (tmp_path / "proj.py").write_text(PROJECT.format(url=pg_url, rule=LAST_FRIDAY))
    sys.path.insert(0, str(tmp_path))
    sys.modules.pop("proj", None)
    try:
        module: Any = importlib.import_module("proj")
        store = SqlStore(pg_url)
        store.ensure_schema()
        store.register_epoch(1)
        yield Project(tmp_path, module.app, store)
        store.close()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("proj", None)


def _next(project: Project, name: str, count: int = 4) -> list[str]:
    ticks = project.ok_json("next", name, "--after", AFTER, "--count", str(count))
    return [t["tick"] for t in ticks]


def test_check_next_show_list_and_a_round_for_every_kind(project: Project) -> None:
    assert project.ok_text("check").splitlines()[0] == "5 schedules OK"
    project.sync_config()

    sunsets = _sun("sunset", AFTER_DT, 4)
    shown = _next(project, "tallinn-sunset")
    _agree(shown, sunsets)
    assert all(t.endswith("+01:00") for t in shown)  # shown in the app's zone, Berlin
    tallinn = ZoneInfo("Europe/Tallinn")
    sunrises = [s for s in _sun("sunrise", AFTER_DT, 30) if s.astimezone(tallinn).day != 25]
    shown = _next(project, "tallinn-sunrise", 25)
    _agree(shown, sunrises[:25])
    assert all(t.endswith("+02:00") for t in shown)  # in its own tz, Tallinn
    assert not [t for t in shown if t.startswith("2026-12-25")]  # excluded in Tallinn's zone

    rule = rrulestr(LAST_FRIDAY, dtstart=datetime(1970, 1, 1))
    walls = rule.xafter(AFTER_DT.astimezone(BERLIN).replace(tzinfo=None), count=4)
    assert _next(project, "last-friday") == [w.replace(tzinfo=BERLIN).isoformat() for w in walls]
    assert _next(project, "month-end") == [
        "2026-12-31T09:00:00+01:00",
        "2027-01-31T09:00:00+01:00",
        "2027-02-28T09:00:00+01:00",
        "2027-03-31T09:00:00+02:00",
    ]
    assert _next(project, "even-hours") == [  # by hand: start_at 04:00Z, even UTC hours at :15
        "2026-12-04T05:15:00+01:00",
        "2026-12-04T07:15:00+01:00",
        "2026-12-04T09:15:00+01:00",
        "2026-12-04T11:15:00+01:00",
    ]

    kinds = {s["name"]: s["kind"] for s in project.ok_json("list")}
    assert kinds == {
        "tallinn-sunset": "solar",
        "tallinn-sunrise": "solar",
        "last-friday": "rrule",
        "month-end": "cron",
        "even-hours": "custom",
    }
    words = {name: project.ok_json("show", name)["description"] for name in kinds}
    assert words["tallinn-sunset"].startswith("at sunset in 59.437, 24.745"), words
    assert "last Friday" in words["last-friday"] and "09:00" in words["last-friday"], words
    assert "last day of the month" in words["month-end"], words
    assert "EveryOtherHour(minute=15)" in words["even-hours"], words
    sunset = project.ok_json("show", "tallinn-sunset")
    assert sunset["schedule"] == "@solar sunset 59.437 24.745"
    custom = project.ok_json("show", "even-hours")
    assert custom["schedule"] == "custom proj:EveryOtherHour EveryOtherHour(minute=15)"

    # a round at its next sunset (as planned from the store's now) fires it under the id of
    # its truncated instant
    first_ms = sunset["next_tick_ms"]
    assert first_ms % 1000 == 0
    sent = project.dispatch_at(first_ms + 500)
    assert first_ms in sent
    (event,) = [
        e
        for e in project.ok_json("history", "tallinn-sunset")["events"]
        if e["tick_ms"] == first_ms
    ]
    assert event["task_id"] == tick_task_id("tallinn-sunset", first_ms)


def test_check_refuses_a_custom_class_without_next_after_naming_the_method(
    tmp_path: Path, pg_url: str
) -> None:
    module = textwrap.dedent(
        f"""\
        from celery import Celery
        from celery.schedules import BaseSchedule

        class Fortnightly(BaseSchedule):
            def remaining_estimate(self, last_run_at):
                return None

        app = Celery("proj", broker="memory://", set_as_current=False)
        app.conf.update(
            durable_beat_url={pg_url!r},
            beat_schedule={{"fortnight": {{"task": "t", "schedule": Fortnightly()}}}},
        )
        """
    )
    (tmp_path / "proj.py").write_text(module)
    project = Project(tmp_path, Celery(set_as_current=False), None)  # type: ignore[arg-type]
    done = project.cli("check")
    assert done.returncode == 2, done.stderr
    assert 'schedule "fortnight"' in done.stderr
    assert "proj:Fortnightly is a custom schedule class without a next_after() method" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr


# -- the HTTP API and the console ------------------------------------------------------------
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


def test_api_put_takes_solar_and_rrule_strings_and_get_gives_them_back(client: Http) -> None:
    rule = f"DTSTART;TZID=America/New_York:20260101T083000\n{LAST_FRIDAY.replace('=9', '=8')}"
    for name, schedule in (("dusk", "@solar dusk_civil 59.437 24.745"), ("report", rule)):
        entry = {"task": "proj.t", "schedule": schedule}
        answer = client.put(f"/api/v1/schedules/{name}", json=entry, headers=ADMIN)
        assert answer.status_code == 201, answer.text
        got = client.get(f"/api/v1/schedules/{name}?count=3", headers=ADMIN).json()
        assert got["schedule"] == schedule and len(got["next"]) == 3, got
        again = client.put(
            f"/api/v1/schedules/{name}",
            json={"task": "proj.t", "schedule": got["schedule"], "tz": got["tz"]},
            headers=ADMIN,
        )
        assert again.json()["status"] == "unchanged", again.text  # what GET says, PUT takes
    report = client.get("/api/v1/schedules/report?count=2", headers=ADMIN).json()
    assert report["kind"] == "rrule" and report["tz"] == "America/New_York"
    assert all(t.endswith(("T08:00:00-05:00", "T08:00:00-04:00")) for t in report["next"])

    bad = {"task": "proj.t", "schedule": "@solar sunsett 59.437 24.745"}
    answer = client.put("/api/v1/schedules/bad", json=bad, headers=ADMIN)
    assert answer.status_code == 422
    assert "sunsett" in answer.json()["error"]["problems"][0]["problem"]
    never = {"task": "proj.t", "schedule": "RRULE:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30"}
    answer = client.put("/api/v1/schedules/never", json=never, headers=ADMIN)
    assert answer.status_code == 422, answer.text

    form = client.get("/login").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', form)
    assert csrf is not None
    data = {"token": "admin-t0ken-0123456", "csrf": csrf.group(1)}
    listing = client.post("/login", data=data, follow_redirects=True)
    assert listing.status_code == 200, listing.text
    row = listing.text[listing.text.index('href="/schedules/dusk"') :].split("</tr>")[0]
    assert 'title="a solar event">solar</span>' in row and "at civil dusk in 59.437" in row
    row = listing.text[listing.text.index('href="/schedules/report"') :].split("</tr>")[0]
    assert 'title="an RFC 5545 recurrence rule">rrule</span>' in row
    assert "last Friday" in row
