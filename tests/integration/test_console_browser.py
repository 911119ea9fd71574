"""The console in a real browser: ``durable-beat serve`` run as a process (the CLI verb), and
Debian's chromium driven by playwright (never ``playwright install``: nothing is downloaded).

Set ``DURABLE_BEAT_SCREENSHOTS=docs`` to write the screenshots docs/console.md shows.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo

import httpx
import pytest

from celery_durable_beat import DurableBeat
from celery_durable_beat.celery_config import definitions_from_app
from celery_durable_beat.sync import sync_definitions
from tests.integration.test_cli import make_project, write_project
from tests.support.procs import wait_until
from tests.support.webserver import free_port

pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.timeout(180)]

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKENS: dict[str, Any] = {
    "viewer-secret-0001": "viewer",
    "operator-secret-0002": "operator",
    "alice-secret-0003": {"role": "operator", "name": "alice"},  # SPEC §15: a named token
}
ODD = "reports/daily ünï côde & <b>x</b>"
SCHEDULE = {
    "nightly-digest": {
        "task": "proj.digest",
        "schedule": "30 3 * * 1-5",
        "tz": "America/New_York",
        "kwargs": {"api_password": "hunter2", "team": "ops"},
        "description": "<script>window.pwned = 1</script>Sends the digest",
    },
    ODD: {"task": "proj.odd", "schedule": "@every 15m"},
    **{
        f"tenant-{n:03d}": {"task": "proj.poll", "schedule": f"{n % 60} * * * *"}
        for n in range(150)
    },
}
FLOWER = "http://flower.example:5555"


@dataclass
class Served:
    url: str
    log: Path
    beat: DurableBeat


@pytest.fixture
def served(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[Served]:
    app = write_project(
        tmp_path,
        pg_url,
        broker=redis_url,
        beat_schedule=SCHEDULE,
        durable_beat_api_tokens=TOKENS,
        durable_beat_flower_url=FLOWER,
    )
    control = DurableBeat(app)
    sync_definitions(
        control.store, definitions_from_app(app, control.settings), control.store.now_ms()
    )
    port = free_port()
    log = tmp_path / "serve.log"
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("DURABLE_BEAT_URL", None)
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "proj",
                "durable-beat",
                "serve",
                "--port",
                str(port),
            ],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _answers(url, proc), timeout=30, what="serve to answer /healthz")
        yield Served(url, log, control)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        control.close()


def _answers(url: str, proc: subprocess.Popen[bytes]) -> bool:
    assert proc.poll() is None, "serve exited"
    try:
        return httpx.get(url + "/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def browser() -> Iterator[Any]:
    if not shutil.which(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: scripts/check installs it (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield launched
        finally:
            launched.close()


def sign_in(page: Any, url: str, token: str) -> None:
    page.goto(url + "/")
    assert page.url.endswith("/login")
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url(url + "/")


def shoot(page: Any, name: str, tmp: Path, *, full_page: bool = False) -> Path:
    folder = Path(os.environ.get("DURABLE_BEAT_SCREENSHOTS", tmp))
    target = folder / name
    page.screenshot(path=str(target), full_page=full_page)
    assert target.stat().st_size > 10_000
    return target


def test_viewer_reads_and_cannot_act(served: Served, browser: Any, tmp_path: Path) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    page.goto(served.url + "/login")
    page.fill("#token", "wrong")
    page.click("button[type=submit]")
    assert "That token is not known." in page.inner_text("[role=alert]")

    forged = page.request.post(served.url + "/login", form={"token": "viewer-secret-0001"})
    assert forged.status == 403  # no sign-in without the form's CSRF value

    sign_in(page, served.url, "viewer-secret-0001")
    cookie = next(c for c in context.cookies() if c["name"] == "durable_beat_session")
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert "1\N{EN DASH}100 of 152" in page.inner_text(".count")  # paged: 100 rows, not 152
    assert page.locator("table.schedules tbody tr").count() == 100
    shoot(page, "console.png", tmp_path)

    page.fill("input[name=q]", "digest")
    page.click("form.filters button")
    rows = page.locator("table.schedules tbody tr")
    assert rows.count() == 1
    row = rows.first.inner_text()
    assert "nightly-digest" in row and "America/New_York" in row and "active" in row
    assert "03:30" in row  # the schedule in words, in its zone

    page.click("text=nightly-digest")
    assert page.evaluate("window.pwned") is None  # the description is text, not markup
    assert "<script>window.pwned = 1</script>Sends the digest" in page.inner_text("dl")
    assert '"api_password": "***"' in page.inner_text("dl")
    assert "hunter2" not in page.content()
    assert page.locator("form[action$='/pause']").count() == 0  # nothing to press for a viewer
    assert page.locator("form[action$='/trigger']").count() == 0
    refused = page.request.post(served.url + "/schedules/nightly-digest/pause", form={"csrf": "x"})
    assert refused.status == 403

    page.set_viewport_size({"width": 390, "height": 844})  # a phone
    shoot(page, "console-phone.png", tmp_path)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390 + 1
    context.close()


def test_operator_pauses_resumes_and_runs_now(served: Served, browser: Any, tmp_path: Path) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    sign_in(page, served.url, "operator-secret-0002")
    page.goto(served.url + "/schedules/" + quote(ODD, safe=""))
    assert page.inner_text("h1").startswith(ODD)

    page.click("text=Pause")
    assert "Paused." in page.inner_text("[role=status]")
    assert served.beat.get(ODD).state == "paused"
    page.click("text=Resume")
    assert served.beat.get(ODD).state == "active"
    page.click("text=Run now")
    assert "Sent." in page.inner_text("[role=status]")
    link = page.locator("table a[href^='http://flower.example:5555/task/']")
    assert link.count() == 1
    task_id = served.beat.history(ODD, limit=1).events[0].task_id
    assert link.get_attribute("href") == f"{FLOWER}/task/{quote(task_id or '', safe='')}"
    shoot(page, "console-schedule.png", tmp_path)

    form = page.locator("form[action$='/trigger']")
    again = {"csrf": form.locator("[name=csrf]").get_attribute("value") or "", "run": "dbl-1"}
    path = served.url + "/schedules/" + quote(ODD, safe="") + "/trigger"
    assert page.request.post(path, form=again).ok and page.request.post(path, form=again).ok
    manual = [e for e in served.beat.history(ODD, limit=10).events if e.trigger == "manual"]
    assert len(manual) == 2  # the click above, and the double submit once

    forged = page.request.post(
        served.url + "/schedules/" + quote(ODD, safe="") + "/pause", form={"csrf": "forged"}
    )
    assert forged.status == 403 and served.beat.get(ODD).state == "active"
    context.close()


def test_operator_backfills_and_the_page_shows_who_did_what(
    served: Served, browser: Any, tmp_path: Path
) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    sign_in(page, served.url, "alice-secret-0003")
    page.goto(served.url + "/schedules/nightly-digest")
    page.fill("form[action$='/pause'] input[name=reason]", "vendor maintenance INC-42")
    page.click("text=Pause")
    assert "Paused by alice" in page.inner_text(".alert.warn")
    assert "vendor maintenance INC-42" in page.inner_text(".alert.warn")
    page.fill("form[action$='/resume'] input[name=reason]", "vendor is back")
    page.click("text=Resume")
    page.fill("form[action$='/trigger'] input[name=reason]", "smoke test")
    page.click("text=Run now")
    assert "Sent." in page.inner_text("[role=status]")

    wall = datetime.now(ZoneInfo("America/New_York")).replace(tzinfo=None, microsecond=0)
    start, end = wall - timedelta(days=7), wall - timedelta(minutes=1)
    weekdays = sum(
        1
        for d in range(9)
        if start < (t := (start.replace(hour=3, minute=30, second=0) + timedelta(days=d))) <= end
        and t.weekday() < 5
    )
    form = page.locator("#backfill form")

    def fill_window() -> None:
        form.locator("[name=from]").fill(start.isoformat())
        form.locator("[name=to]").fill(end.isoformat())
        form.locator("[name=reason]").fill("the digests were lost downstream")

    fill_window()
    form.locator("button[name=preview]").click()
    status = page.inner_text("[role=status]")
    assert f"Would send {weekdays} of {weekdays} occurrences (0 already enqueued)." in status
    assert page.locator("#backfill ol li").count() == weekdays
    assert [e.trigger for e in served.beat.history("nightly-digest").events] == ["manual"]
    fill_window()
    page.locator("#backfill form button.primary").click()
    assert f"Sent {weekdays} of {weekdays}" in page.inner_text("[role=status]")
    assert "signed in as alice (operator)" in page.inner_text(".who")
    shoot(page, "console-actions.png", tmp_path, full_page=True)
    sent = list(served.beat.history("nightly-digest", limit=30).events)
    backfilled = [e for e in sent if e.trigger == "backfill"]
    assert {e.outcome for e in backfilled} == {"enqueued"} and len(backfilled) == weekdays

    log = page.locator("#actions tbody tr")
    rows = [log.nth(i).inner_text().split("\t") for i in range(log.count())]
    assert [(r[1], r[2], r[3]) for r in rows] == [
        ("alice", "backfill", "the digests were lost downstream"),
        ("alice", "trigger", "smoke test"),
        ("alice", "resume", "vendor is back"),
        ("alice", "pause", "vendor maintenance INC-42"),
    ]
    csrf = form.locator("[name=csrf]").get_attribute("value") or ""
    path = served.url + "/schedules/nightly-digest/backfill"
    window = {"from": start.isoformat(), "to": end.isoformat()}
    assert page.request.post(path, form={**window, "csrf": "forged"}).status == 403
    again = page.request.post(path, form={**window, "csrf": csrf})
    assert again.ok and f"Sent 0 of {weekdays}" in again.text()  # a second run sends nothing
    context.close()


def test_serve_answers_metrics_from_the_store(served: Served) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(served.url + "/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(families) >= {
        "durable_beat_schedules",
        "durable_beat_due_backlog",
        "durable_beat_fencing_epoch",
    }
    by_state = {s.labels["state"]: s.value for s in families["durable_beat_schedules"].samples}
    assert by_state["active"] == len(SCHEDULE) and by_state["paused"] == 0
    assert all(set(s.labels) <= {"state"} for f in families.values() for s in f.samples)


def test_serve_logs_no_token_and_refuses_to_start_without_one(
    served: Served, tmp_path: Path, pg_url: str
) -> None:
    for token in TOKENS:
        httpx.get(
            f"{served.url}/api/v1/status?token={token}",
            headers={"Authorization": f"Bearer {token}"},
        )
    wait_until(lambda: "/api/v1/status" in served.log.read_text(), timeout=10, what="access log")
    text = served.log.read_text()
    assert not any(token in text for token in TOKENS), text

    bare = tmp_path / "bare"
    bare.mkdir()
    project = next(make_project(bare, pg_url))
    done = project.cli_process("serve", "--port", "1")
    project.store.close()
    assert done.returncode == 2, done.stderr
    assert "durable_beat_api_tokens" in done.stderr and "Traceback" not in done.stderr
