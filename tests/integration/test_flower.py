"""Flower, proven (SPEC §1: ticks are ordinary task messages, visible in Flower).

A real Flower (``celery flower``, from PyPI) on loopback, a real Redis broker, a worker sending
task events (``-E``) and a real beat. Through Flower's HTTP API only: a tick shows under its
readable id (``name@instant``), searching Flower for the schedule's name finds its ticks and
no other schedule's, and its kwargs show redacted (``'api_password': '***'``) while the task
itself received the real value, which appears nowhere in Flower's answers.
"""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.procs import free_port, wait_until
from tests.support.rig import ProcessRig, app_env

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TICK_ID = re.compile(r"^partner-sync@\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


class FlowerApi:
    """GETs on a Flower's API; each answer's text is kept, to look for the secret in."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.texts: list[str] = []

    def get(self, path: str, **query: str) -> Any:
        url = self.base + path + ("?" + urllib.parse.urlencode(query) if query else "")
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        self.texts.append(text)
        return json.loads(text)

    def answers(self) -> bool:
        try:
            self.get("/api/workers")
        except OSError:
            return False
        return True


def test_a_tick_shows_in_flower_under_its_id_searchable_and_redacted(
    tmp_path: Path, sqlite_url: str, redis_url: str
) -> None:
    secret = f"hunter2-{uuid.uuid4().hex}"
    schedule = {
        "partner-sync": {
            "task": "procapp.record",
            "schedule": "@every 1s",
            "kwargs": {"partner": "acme", "api_password": secret},
        },
        "other-probe": {"task": "procapp.record", "schedule": "@every 1s"},
    }
    rig = ProcessRig(tmp_path, sqlite_url, redis_url, schedule=schedule, guard=False)
    port = free_port()
    flower = FlowerApi(port)
    try:
        process = rig.celery(
            ["flower", "--address=127.0.0.1", f"--port={port}"],
            "flower",
            env={"FLOWER_UNAUTHENTICATED_API": "1"},
        )
        wait_until(flower.answers, 30, f"Flower on port {port}\n{process.tail()}", 0.3)
        rig.worker(flags=["-E"])
        rig.beat()

        def partner_ticks() -> dict[str, Any]:
            tasks = flower.get("/api/tasks", limit="100")
            return {k: v for k, v in tasks.items() if k.startswith("partner-sync@")}

        found = wait_until(partner_ticks, 60, "a partner-sync tick in Flower's /api/tasks", 0.5)
        task_id = sorted(found)[0]
        assert TICK_ID.match(task_id), task_id

        searched = wait_until(
            lambda: flower.get("/api/tasks", search="partner-sync", limit="100"),
            30,
            "Flower's search for partner-sync",
            0.5,
        )
        assert task_id in searched
        assert all(key.startswith("partner-sync@") for key in searched), sorted(searched)
        wait_until(
            lambda: any(
                k.startswith("other-probe@") for k in flower.get("/api/tasks", limit="100")
            ),
            30,
            "an other-probe tick beside partner-sync's in Flower's unfiltered /api/tasks",
            0.5,
        )

        quoted = urllib.parse.quote(task_id, safe="")
        info = wait_until(
            lambda: (i := flower.get(f"/api/task/info/{quoted}")).get("state") == "SUCCESS" and i,
            30,
            f"{task_id} to succeed in Flower",
            0.5,
        )
        assert info["uuid"] == task_id and info["name"] == "procapp.record"
        assert "'api_password': '***'" in info["kwargs"], info["kwargs"]
        assert "'partner': 'acme'" in info["kwargs"], info["kwargs"]
        assert not [t for t in flower.texts if secret in t], "the secret reached Flower"
        ran = [r for r in rig.rows("run") if r["id"] == task_id]
        assert ran and ran[0]["kwargs"]["api_password"] == secret, "the task got the real value"
        (tmp_path / "flower-task.json").write_text(json.dumps(info, indent=2))
    finally:
        rig.close()
    assert all(not p.alive() for p in rig.procs)


def test_a_one_off_tick_shows_in_flower_under_its_id(
    tmp_path: Path, sqlite_url: str, redis_url: str
) -> None:
    """SPEC §15: an ``@at`` tick is an ordinary tick: Flower finds it as ``launch@<instant>``,
    and it runs once."""
    from datetime import datetime, timedelta, timezone

    from celery_durable_beat import tick_task_id

    rig = ProcessRig(tmp_path, sqlite_url, redis_url, guard=False)
    port = free_port()
    flower = FlowerApi(port)
    try:
        process = rig.celery(
            ["flower", "--address=127.0.0.1", f"--port={port}"],
            "flower",
            env={"FLOWER_UNAUTHENTICATED_API": "1"},
        )
        wait_until(flower.answers, 30, f"Flower on port {port}\n{process.tail()}", 0.3)
        rig.worker(flags=["-E"])
        # The instant is set once Flower and the worker are up, so their start-up (slow on a
        # loaded machine) cannot eat the margin beat needs to store it while still ahead.
        at = (datetime.now(timezone.utc) + timedelta(seconds=12)).replace(microsecond=0)
        schedule = {"launch": {"task": "procapp.record", "schedule": f"@at {at.isoformat()}"}}
        rig.env.update(app_env({"schedule": schedule}))
        expected = tick_task_id("launch", int(at.timestamp() * 1000))
        rig.beat()

        def launched() -> dict[str, Any]:
            tasks = flower.get("/api/tasks", search="launch", limit="100")
            done = tasks.get(expected, {}).get("state") == "SUCCESS"
            return tasks if done else {}

        listed = wait_until(launched, 60, f"{expected} to succeed in Flower", 0.5)
        assert list(listed) == [expected]
        assert listed[expected]["name"] == "procapp.record"
        assert [r["id"] for r in rig.rows("run")] == [expected]  # ran once
        (tmp_path / "flower-tasks.json").write_text(json.dumps(listed, indent=2))
    finally:
        rig.close()
    assert all(not p.alive() for p in rig.procs)
