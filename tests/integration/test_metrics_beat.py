"""Real `celery beat` processes with `durable_beat_metrics_port`: `/metrics` scraped over HTTP
and parsed with prometheus_client's own parser (SPEC §10), on the leader and on a standby."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from celery_durable_beat.model import Action
from tests.support.procs import free_port, wait_until
from tests.support.rig import ProcessRig, rig_factory

pytestmark = pytest.mark.integration

SCHEDULE = {"often": {"task": "procapp.record", "schedule": "@every 1s"}}
ENQUEUED = {"outcome": "enqueued", "reason": "", "trigger": "auto"}

# The families as the parser names them (a counter's without `_total`) and the label names of
# their samples (a histogram's `le` aside): exactly SPEC §10.
EXPECTED_LABELS = {
    "durable_beat_ticks": {("outcome", "reason", "trigger")},
    "durable_beat_dispatch_lag_seconds": {()},
    "durable_beat_round_seconds": {()},
    "durable_beat_last_round_timestamp_seconds": {()},
    "durable_beat_due_backlog": {()},
    "durable_beat_schedules": {("state",)},
    "durable_beat_leader": {()},
    "durable_beat_fencing_epoch": {()},
    "durable_beat_redelivered": {()},
}


@pytest.fixture
def make_rig(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[Any]:
    rig = partial(ProcessRig, store_url=pg_url, broker_url=redis_url, guard=False, poll=0.2)
    with rig_factory(tmp_path, rig) as make:
        yield make


class Scrape:
    """One parsed `/metrics` answer."""

    def __init__(self, text: str) -> None:
        self.families = {f.name: f for f in text_string_to_metric_families(text)}

    def value(self, name: str, **labels: str) -> float | None:
        for family in self.families.values():
            for sample in family.samples:
                if sample.name == name and sample.labels == labels:
                    return float(sample.value)
        return None

    def ours(self) -> dict[str, set[tuple[str, ...]]]:
        """Our families and the label-name sets of their samples."""
        return {
            name: {tuple(sorted(k for k in s.labels if k != "le")) for s in family.samples}
            for name, family in self.families.items()
            if name.startswith("durable_beat_")
        }


def scrape(port: int) -> Scrape | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            return Scrape(answer.read().decode())
    except OSError:
        return None


def wait_scrape(port: int, check: Any, timeout: float, what: str) -> Scrape:
    """Scrape until ``check(scrape)`` holds (a deadline poll)."""
    return wait_until(lambda: (s := scrape(port)) is not None and check(s) and s, timeout, what)


def test_leader_and_standby_serve_the_specs_metrics(make_rig: Any) -> None:
    rig = make_rig(schedule=SCHEDULE)
    leader_port, standby_port = free_port(), free_port()
    leader = rig.beat("beat-a", metrics_port=leader_port)
    leader.wait_action(Action.LEADERSHIP_GAINED.value, 60)
    first = wait_scrape(
        leader_port,
        lambda s: (s.value("durable_beat_ticks_total", **ENQUEUED) or 0) >= 2,
        60,
        "two enqueued ticks counted",
    )
    assert first.ours() == EXPECTED_LABELS, first.ours()
    assert first.value("durable_beat_leader") == 1
    epoch = first.value("durable_beat_fencing_epoch")
    assert epoch is not None and epoch >= 1
    assert first.value("durable_beat_schedules", state="active") == 1
    assert first.value("durable_beat_schedules", state="quarantined") == 0
    assert (first.value("durable_beat_dispatch_lag_seconds_count") or 0) >= 2
    assert (first.value("durable_beat_round_seconds_count") or 0) >= 2
    assert (first.value("durable_beat_last_round_timestamp_seconds") or 0) > 0
    states = {s.labels["state"] for s in first.families["durable_beat_schedules"].samples}
    assert states == {"active", "paused", "archived", "quarantined"}
    labels = {v for f in first.families.values() for s in f.samples for v in s.labels.values()}
    assert "often" not in labels and "procapp.record" not in labels

    later = wait_scrape(
        leader_port,
        lambda s: (
            (s.value("durable_beat_ticks_total", **ENQUEUED) or 0)
            > (first.value("durable_beat_ticks_total", **ENQUEUED) or 0)
        ),
        30,
        "the counter goes on rising",
    )
    assert later.value("durable_beat_leader") == 1

    standby = rig.beat("beat-b", metrics_port=standby_port)
    standby.wait_action(Action.STANDBY.value, 60)
    seen = wait_scrape(
        standby_port,
        lambda s: (
            s.value("durable_beat_fencing_epoch") == epoch
            and s.value("durable_beat_schedules", state="active") == 1
        ),
        30,
        "the standby's scrape, with the store's counts",
    )
    assert seen.ours() == {**EXPECTED_LABELS, "durable_beat_ticks": set()}  # no ticks as standby
    assert seen.value("durable_beat_leader") == 0
    assert seen.value("durable_beat_round_seconds_count") == 0
    assert seen.value("durable_beat_last_round_timestamp_seconds") == 0
    assert seen.value("durable_beat_schedules", state="active") == 1
    rig.assert_all_alive()


def test_a_taken_port_is_one_line_naming_the_setting_and_a_clean_exit(make_rig: Any) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # beat binds every interface, so the clash must be there
        taken.listen()
        port = taken.getsockname()[1]
        beat = make_rig(schedule=SCHEDULE).beat(metrics_port=port)
        assert beat.wait_exit(60) == 2, beat.tail()
    said = [line for line in beat.output().splitlines() if "beat refuses to start" in line]
    assert len(said) == 1, beat.tail()
    assert f"setting durable_beat_metrics_port = {port}: cannot listen on it" in said[0]
    assert "Traceback" not in beat.output(), beat.tail()
