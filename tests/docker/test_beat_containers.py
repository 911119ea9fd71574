"""The compose services' image, run by pytest-celery (SPEC §13): a tick travels from a beat
container to a worker container, and killing the leading beat container hands over.

Needs a Docker engine (marker ``docker``; deselected with the reason when none answers):
``scripts/check -m docker``. The first run builds docker/Dockerfile and pulls Redis and
PostgreSQL, which takes minutes.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime, timezone
from typing import Any

import pytest

from tests.support.procs import wait_until

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

SUCCEEDED = re.compile(
    r"Task proj\.heartbeat\[(heartbeat@(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)Z)\] succeeded"
)


def heartbeats(worker: Any) -> list[tuple[str, datetime]]:
    """The heartbeat ticks the worker container logged as succeeded: id and tick instant."""
    return [
        (m.group(1), datetime.fromisoformat(m.group(2)).replace(tzinfo=timezone.utc))
        for m in SUCCEEDED.finditer(worker.logs())
    ]


def test_a_tick_travels_from_a_beat_container_to_the_worker(celery_setup: Any, beat_a: Any) -> None:
    ran = wait_until(lambda: heartbeats(celery_setup.worker), 90, "a heartbeat tick executed", 1)
    task_id, _ = ran[0]
    assert task_id.startswith("heartbeat@") and task_id.endswith("Z")
    assert "beat: Starting..." in beat_a.logs()


def test_killing_the_leading_beat_container_hands_over(
    celery_setup: Any, beat_a: Any, beat_b: Any
) -> None:
    beats = [beat_a, beat_b]

    def one_leader() -> Any:
        states = [beat.leads() for beat in beats]
        return states.count(True) == 1 and states.count(False) == 1 and beats[states.index(True)]

    leader = wait_until(one_leader, 90, "one leading and one standby beat container", 1)
    standby = beat_b if leader is beat_a else beat_a
    wait_until(lambda: heartbeats(celery_setup.worker), 60, "a tick before the kill", 1)

    killed_at = datetime.now(timezone.utc)
    leader.kill()  # SIGKILL: no release, the standby waits out the lease (30 s by default)
    wait_until(standby.leads, 120, "the standby container to take over", 1)
    after = wait_until(
        lambda: [t for t in heartbeats(celery_setup.worker) if t[1] > killed_at],
        90,
        "a tick the new leader dispatched",
        1,
    )
    assert after
    counts = Counter(task_id for task_id, _ in heartbeats(celery_setup.worker))
    assert all(n == 1 for n in counts.values()), counts
