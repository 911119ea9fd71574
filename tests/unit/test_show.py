"""``show`` and ``DurableBeat.get`` say what will really happen (SPEC §8, issue #11 items 5, 6).

On the in-memory store with its clock pinned, so "beat was down for half an hour" is a value,
not a wait: the store's now moves, nothing sleeps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from celery import Celery

from celery_durable_beat import DurableBeat
from celery_durable_beat.cli.format import NO_LEADER, status_lines
from celery_durable_beat.control import check_config
from celery_durable_beat.control.views import DETAIL_FIELDS, LIST_FIELDS
from celery_durable_beat.redact import MASK
from celery_durable_beat.store.memory import MemoryStore
from celery_durable_beat.testing import MemoryLease

from ._support import ms

pytestmark = pytest.mark.unit

SPEC_SHOW_FIELDS = {
    *LIST_FIELDS,
    # paused_by: SPEC §15
    *("description", "about", "overdue", "next", "args", "kwargs", "options", "paused_by"),
}
REPORT = {
    "task": "proj.report",
    "schedule": "* * * * *",
    "description": "the minutely report for the ops channel",
}


class Clock:
    """The store's clock, moved by hand."""

    def __init__(self, iso: str) -> None:
        self.now = ms(iso)

    def set(self, iso: str) -> None:
        self.now = ms(iso)

    def __call__(self) -> int:
        return self.now


def make_beat(clock: Callable[[], int], **conf: Any) -> tuple[DurableBeat, MemoryStore]:
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(timezone="Europe/Berlin", durable_beat_url="sqlite:///unused.db", **conf)
    store = MemoryStore(clock=clock)
    return DurableBeat(app, store=store), store


@pytest.fixture
def clock() -> Clock:
    return Clock("2026-05-04T15:48:30+02:00")


def test_get_is_flat_with_exactly_the_show_fields(clock: Clock) -> None:
    beat, _ = make_beat(clock)
    beat.upsert("minutely-report", {**REPORT, "args": [1], "options": {"queue": "reports"}})
    detail = beat.get("minutely-report", count=3)
    shown = detail.to_json()
    assert set(shown) == SPEC_SHOW_FIELDS == set(DETAIL_FIELDS)
    for name, value in shown.items():
        attribute = getattr(detail, name)
        as_json = attribute.to_json() if hasattr(attribute, "to_json") else attribute
        assert (list(as_json) if isinstance(as_json, tuple) else as_json) == value, name
    assert (detail.source, detail.version) == ("api", 1)
    assert detail.next == (
        "2026-05-04T15:49:00+02:00",
        "2026-05-04T15:50:00+02:00",
        *detail.next[2:],
    )
    assert detail.about == "the minutely report for the ops channel"
    assert detail.description == "every minute (Europe/Berlin)"
    assert (detail.args, dict(detail.kwargs), dict(detail.options)) == (
        (1,),
        {},
        {"queue": "reports"},
    )
    assert not hasattr(detail, "view")


@pytest.mark.parametrize(
    ("policy", "fires", "next_first"),
    [
        ("skip", ["2026-05-04T16:19:00+02:00"], "2026-05-04T16:20:00+02:00"),
        ("run_once", ["2026-05-04T15:49:00+02:00"], "2026-05-04T16:20:00+02:00"),
        (
            "backfill",
            [f"2026-05-04T16:{m}:00+02:00" for m in range(17, 20)],
            "2026-05-04T16:20:00+02:00",
        ),
    ],
)
def test_beat_down_half_an_hour_is_overdue_and_next_is_only_future(
    clock: Clock, policy: str, fires: list[str], next_first: str
) -> None:
    """The issue's demo: beat stopped at 15:48:30, `show` at 16:19:30."""
    beat, store = make_beat(clock)
    beat.upsert("minutely-report", {**REPORT, "missed": policy, "backfill_max": 3})
    clock.set("2026-05-04T16:19:30+02:00")
    detail = beat.get("minutely-report", count=3)
    shown = detail.to_json()
    assert shown["overdue"] == {"since": "2026-05-04T15:49:00+02:00", "missed": 31, "fires": fires}
    assert shown["next"][0] == next_first
    assert all(ms(t) > store.now_ms() for t in shown["next"])  # no stale instant
    assert [t.tick for t in beat.next_ticks("minutely-report", 3)] == shown["next"]


def test_a_schedule_on_time_is_not_overdue(clock: Clock) -> None:
    beat, _ = make_beat(clock)
    beat.upsert("minutely-report", REPORT)
    detail = beat.get("minutely-report", count=2)
    assert detail.overdue is None
    assert detail.next[0] == detail.next_tick == "2026-05-04T15:49:00+02:00"
    beat.pause("minutely-report")
    clock.set("2026-05-04T18:00:30+02:00")
    paused = beat.get("minutely-report", count=1)  # a paused schedule owes nothing
    assert (paused.overdue, paused.next) == (None, ("2026-05-04T18:01:00+02:00",))


def test_args_kwargs_and_options_are_redacted_at_any_depth(clock: Clock) -> None:
    entry = {
        "task": "proj.sync",
        "schedule": "@every 1h",
        "args": [{"db_password": "hunter2", "host": "db"}],
        "kwargs": {
            "API_KEY": "k-123",
            "day": "{{scheduled_for}}",
            "nested": {"list": [{"refresh_token": "t"}], "keep": 1},
        },
        "options": {"headers": {"x-secret": "s"}, "queue": "sync"},
    }
    beat, _ = make_beat(clock)
    beat.upsert("sync", entry)
    shown = beat.get("sync").to_json()
    assert shown["args"] == [{"db_password": MASK, "host": "db"}]
    assert shown["kwargs"] == {
        "API_KEY": MASK,
        "day": "{{scheduled_for}}",
        "nested": {"list": [{"refresh_token": MASK}], "keep": 1},
    }
    assert shown["options"] == {"headers": {"x-secret": MASK}, "queue": "sync"}
    assert "hunter2" not in repr(beat.get("sync"))
    custom, _ = make_beat(clock, durable_beat_redact=["host"])
    custom.upsert("sync", entry)
    assert custom.get("sync").args == ({"db_password": "hunter2", "host": MASK},)


def test_celery_option_names_are_not_hidden_but_their_secrets_are(clock: Clock) -> None:
    """The default needle ``key`` would hide every ``routing_key``: Celery's option names stay
    readable, their values are still walked, and an unknown option named like a secret hides."""
    entry = {
        "task": "proj.sync",
        "schedule": "@every 1h",
        "options": {
            "routing_key": "reports.eu",
            "exchange": "reports",
            "priority": 5,
            "headers": {"api_key": "k-1", "trace": "on"},
            "partner_token": "t-1",
        },
    }
    beat, _ = make_beat(clock)
    beat.upsert("sync", entry)
    assert beat.get("sync").to_json()["options"] == {
        "routing_key": "reports.eu",
        "exchange": "reports",
        "priority": 5,
        "headers": {"api_key": MASK, "trace": "on"},
        "partner_token": MASK,
    }


def test_status_says_plainly_that_no_beat_holds_the_lease(clock: Clock) -> None:
    beat, store = make_beat(clock)
    assert NO_LEADER in status_lines(beat.status())[0]  # no beat has ever led
    lease = MemoryLease(store, ttl_seconds=30, holder="beat-1")
    assert lease.acquire_or_renew().leader
    assert beat.status().leader == "beat-1"
    assert "beat-1 (lease until" in status_lines(beat.status())[0]
    clock.set("2026-05-04T15:49:30+02:00")  # the lease expired: no beat runs
    line = status_lines(beat.status())[0]
    assert NO_LEADER in line and "expired" in line
    assert "Redis" not in line


def test_check_lists_every_problem_and_keeps_the_valid_settings() -> None:
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(
        timezone="UTC",
        durable_beat_url="postgresql+psycopg://u@nowhere:1/x",
        durable_beat_lease_ttl=-1,
        beat_schedule={"ok": {"task": "t", "schedule": "@hourly"}, "bad": {"task": "t"}},
    )
    checked = check_config(app)
    assert not checked.ok
    fields = {(p.entry, p.field) for p in checked.problems}
    assert ("settings", "durable_beat_lease_ttl") in fields
    assert any(entry == "bad" for entry, _ in fields)
    assert checked.settings.url == "postgresql+psycopg://u@nowhere:1/x"  # kept: it is valid
    assert checked.settings.lease_ttl == 30  # the invalid one at its default
    app.conf.update(durable_beat_lease_ttl=10, beat_schedule={"ok": REPORT})
    assert (check_config(app).ok, check_config(app).schedules) == (True, 1)


def test_last_outcome_is_unchanged_by_the_flat_shape(clock: Clock) -> None:
    """The list fields keep their meaning in ``show`` (SPEC: do not change existing fields)."""
    beat, _ = make_beat(clock)
    beat.upsert("minutely-report", REPORT)
    listed = beat.list()[0].to_json()
    shown = beat.get("minutely-report").to_json()
    assert {k: shown[k] for k in LIST_FIELDS} == listed
