"""Who did what (SPEC §15) and backfill on demand, through ``DurableBeat`` on the memory store.

The clock is a parameter: the store's clock is a settable instant, and ticks are dispatched by a
real leader round (``Dispatcher``) so "a tick that ran" is one the round recorded. The SQL
stores keep the same store rules (``tests/integration/test_store_contract.py``); the real
worker and broker are in ``tests/integration/test_backfill_worker.py``.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
from celery import Celery

from celery_durable_beat import DurableBeat
from celery_durable_beat.clock import datetime_to_ms
from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.exceptions import InvalidArgument, ScheduleNotFound
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.message import tick_headers
from celery_durable_beat.model import Trigger
from celery_durable_beat.publish.capturing import CapturingPublisher
from celery_durable_beat.settings import Role, Settings, TokenSpec
from celery_durable_beat.testing import MemoryStore
from celery_durable_beat.web.auth import Tokens, token_name

pytestmark = pytest.mark.unit

T0 = "2026-12-01T10:00:00+00:00"
MINUTELY = {"task": "proj.report", "schedule": "* * * * *", "tz": "UTC"}


def ms(iso: str) -> int:
    return datetime_to_ms(datetime.fromisoformat(iso))


def at(iso: str) -> datetime:
    return datetime.fromisoformat(iso)


class Clock:
    def __init__(self, iso: str) -> None:
        self.now = ms(iso)

    def set(self, iso: str) -> None:
        self.now = ms(iso)

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def store(clock: Clock) -> MemoryStore:
    return MemoryStore(clock=clock)


@pytest.fixture
def publisher() -> CapturingPublisher:
    return CapturingPublisher()


def make_beat(
    store: MemoryStore, publisher: CapturingPublisher, actor: str | None = None, **conf: Any
) -> DurableBeat:
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(timezone="UTC", durable_beat_url="sqlite:///never-opened.sqlite3", **conf)
    return DurableBeat(app, store=store, publisher=publisher, actor=actor)


@pytest.fixture
def beat(store: MemoryStore, publisher: CapturingPublisher) -> DurableBeat:
    return make_beat(store, publisher, actor="cli:ops@box")


def run_rounds(store: MemoryStore, clock: Clock, *instants: str) -> None:
    """One real leader round at each instant (the ticks that "already ran")."""
    for iso in instants:
        clock.set(iso)
        Dispatcher(store, CapturingPublisher(), batch_size=100).run_round(ms(iso), epoch=1)


# -- who did what -----------------------------------------------------------------------------
def test_every_change_records_its_actor_and_reason_newest_first(
    beat: DurableBeat, clock: Clock
) -> None:
    beat.upsert("report", MINUTELY, reason="new report")
    beat.upsert("report", MINUTELY, reason="unchanged: not recorded")
    beat.pause("report", reason="downstream outage INC-42")
    beat.pause("report", reason="already paused: not recorded")
    beat.resume("report", actor="alice")
    beat.trigger("report", idempotency_key="k1", reason="rerun for finance")
    beat.trigger("report", idempotency_key="k1", reason="a replay: not recorded")
    beat.archive("report")
    beat.delete("report", reason="retired")
    page = beat.actions("report")
    shown = [(a.actor, a.action, a.reason) for a in page.actions]
    assert shown == [
        ("cli:ops@box", "delete", "retired"),
        ("cli:ops@box", "archive", None),
        ("cli:ops@box", "trigger", "rerun for finance"),
        ("alice", "resume", None),
        ("cli:ops@box", "pause", "downstream outage INC-42"),
        ("cli:ops@box", "upsert", "new report"),
    ]
    assert page.to_json()["actions"][0] == {
        "at": "2026-12-01T10:00:00Z",
        "actor": "cli:ops@box",
        "action": "delete",
        "schedule": "report",
        "reason": "retired",
    }
    assert page.next_cursor is None


def test_python_callers_are_named_by_user_and_host(
    store: MemoryStore, publisher: CapturingPublisher
) -> None:
    beat = make_beat(store, publisher)
    beat.upsert("report", MINUTELY)
    (only,) = beat.actions().actions
    assert only.actor.startswith("python:") and "@" in only.actor


def test_show_names_who_paused_until_resumed(beat: DurableBeat, clock: Clock) -> None:
    beat.upsert("report", MINUTELY)
    assert beat.get("report").paused_by is None
    clock.set("2026-12-01T10:05:00+00:00")
    beat.pause("report", reason="vendor maintenance", actor="alice")
    assert beat.get("report").to_json()["paused_by"] == {
        "actor": "alice",
        "at": "2026-12-01T10:05:00Z",
        "reason": "vendor maintenance",
    }
    beat.resume("report")
    assert beat.get("report").to_json()["paused_by"] is None


@pytest.mark.parametrize(
    ("reason", "problem"),
    [
        ("x" * 501, "at most 500"),
        ("two\nlines", "control character"),
        ("\x1b[31mred", "control character"),
        (42, "must be text"),
    ],
)
def test_bad_reasons_are_refused_naming_the_field_and_change_nothing(
    beat: DurableBeat, reason: Any, problem: str
) -> None:
    beat.upsert("report", MINUTELY)
    with pytest.raises(InvalidArgument, match=problem) as raised:
        beat.pause("report", reason=reason)
    assert raised.value.field == "reason"
    assert beat.get("report").state == "active"


def test_the_log_is_kept_like_history_per_schedule_and_outlives_it(
    store: MemoryStore, publisher: CapturingPublisher
) -> None:
    beat = make_beat(store, publisher, actor="cli:ops@box", durable_beat_history_keep=3)
    beat.upsert("report", MINUTELY)
    beat.upsert("other", MINUTELY)
    for _ in range(3):
        beat.pause("report")
        beat.resume("report")
    beat.delete("report")
    kept = [a.action for a in beat.actions("report").actions]
    assert kept == ["delete", "resume", "pause"]  # the 3 newest, after the schedule is gone
    assert [a.action for a in beat.actions("other").actions] == ["upsert"]
    with pytest.raises(ScheduleNotFound):
        beat.actions("never-existed")


def test_actions_page_with_a_cursor_and_refuse_a_history_cursor(beat: DurableBeat) -> None:
    beat.upsert("report", MINUTELY)
    for _ in range(2):
        beat.pause("report")
        beat.resume("report")
    first = beat.actions(limit=2)
    assert [a.action for a in first.actions] == ["resume", "pause"]
    assert first.next_cursor is not None
    second = beat.actions(limit=2, cursor=first.next_cursor)
    third = beat.actions(limit=2, cursor=second.next_cursor)
    assert [a.action for a in (*second.actions, *third.actions)] == ["resume", "pause", "upsert"]
    assert third.next_cursor is None
    history_cursor = "aDEuNQ"  # "h1.5": a history cursor
    with pytest.raises(InvalidArgument, match="not one actions gave out"):
        beat.actions(cursor=history_cursor)


def test_token_names_from_settings() -> None:
    named = "n" * 16
    bare = "b" * 16
    conf = {
        "durable_beat_api_tokens": {named: {"role": "operator", "name": "alice"}, bare: "admin"}
    }
    settings = Settings.from_conf(conf, environ={})
    assert settings.api_tokens == {
        named: TokenSpec(role=Role.OPERATOR, name="alice"),
        bare: Role.ADMIN,
    }
    tokens = Tokens(settings.api_tokens)
    alice, admin = tokens.identify(named), tokens.identify(bare)
    assert alice is not None and (alice.role, alice.name) == (Role.OPERATOR, "alice")
    assert admin is not None and admin.role is Role.ADMIN
    assert admin.name == token_name(bare, Role.ADMIN)
    assert admin.name.startswith("admin-") and len(admin.name) == len("admin-") + 6
    assert bare not in admin.name


def test_a_token_spec_without_a_valid_role_or_name_is_refused_without_showing_it() -> None:
    secret = "s" * 16
    for value in (
        {"role": "root", "name": "x"},
        {"role": "viewer", "name": ""},
        {"role": "viewer"},
    ):
        with pytest.raises(Exception, match="durable_beat_api_tokens") as raised:
            Settings.from_conf({"durable_beat_api_tokens": {secret: value}}, environ={})
        assert secret not in str(raised.value)


# -- backfill ---------------------------------------------------------------------------------
def test_backfill_sends_only_the_ticks_that_never_ran_with_their_automatic_ids(
    beat: DurableBeat, store: MemoryStore, clock: Clock, publisher: CapturingPublisher
) -> None:
    beat.upsert("report", MINUTELY)  # first tick 10:01
    run_rounds(store, clock, "2026-12-01T10:01:00+00:00", "2026-12-01T10:02:00+00:00")
    clock.set("2026-12-01T10:30:00+00:00")  # 10:03 .. 10:30 never ran (no beat)
    window = at("2026-12-01T10:00:00+00:00"), at("2026-12-01T10:05:00+00:00")
    dry = beat.backfill("report", *window, dry_run=True)
    assert (dry.occurrences, dry.already_enqueued, dry.dry_run) == (6, 2, True)
    assert [t.tick for t in dry.ticks] == [
        "2026-12-01T10:00:00Z",
        "2026-12-01T10:03:00Z",
        "2026-12-01T10:04:00Z",
        "2026-12-01T10:05:00Z",
    ]
    assert publisher.messages == [] and beat.actions("report").actions[0].action == "upsert"

    done = beat.backfill("report", *window, reason="catch up after INC-42")
    assert not done.dry_run and done.ticks == dry.ticks
    sent = publisher.messages
    assert [m.task_id for m in sent] == [tick_task_id("report", t.tick_ms) for t in dry.ticks]
    assert {tick_headers(m)["periodic_trigger"] for m in sent} == {"backfill"}
    assert {tick_headers(m)["periodic_task_name"] for m in sent} == {"report"}
    recorded = {e.task_id: e.trigger for e in beat.history("report", limit=100).events}
    assert all(recorded[m.task_id] == Trigger.BACKFILL.value for m in sent)
    newest = beat.actions("report").actions[0]
    assert (newest.action, newest.reason, newest.actor) == (
        "backfill",
        "catch up after INC-42",
        "cli:ops@box",
    )

    again = beat.backfill("report", *window)
    assert (again.ticks, again.already_enqueued, again.dry_run) == ((), 6, False)
    assert len(publisher.messages) == 4  # nothing sent the second time
    assert beat.actions("report").actions[0].action == "backfill"  # and nothing recorded


def test_an_automatic_tick_after_a_backfill_dedups_by_id(
    beat: DurableBeat, store: MemoryStore, clock: Clock
) -> None:
    beat.upsert("report", MINUTELY)
    clock.set("2026-12-01T10:01:30+00:00")
    beat.backfill("report", at("2026-12-01T10:01:00+00:00"), at("2026-12-01T10:01:00+00:00"))
    captured = CapturingPublisher()
    Dispatcher(store, captured, batch_size=100).run_round(clock.now, epoch=1)
    assert captured.messages == []  # the round saw the tick's enqueued record
    outcomes = [(e.trigger, e.outcome) for e in beat.history("report").events]
    assert outcomes == [("auto", "deduplicated"), ("backfill", "enqueued")]


def test_backfill_refuses_a_window_over_1000_occurrences_with_the_count(
    beat: DurableBeat, clock: Clock, publisher: CapturingPublisher
) -> None:
    beat.upsert("report", MINUTELY)
    clock.set("2026-12-03T00:00:00+00:00")
    with pytest.raises(InvalidArgument, match=r"holds 1441 occurrences; .* at most 1000"):
        beat.backfill("report", at("2026-12-01T12:00:00+00:00"), at("2026-12-02T12:00:00+00:00"))
    beat.upsert("fast", {"task": "proj.fast", "schedule": "@every 1s"})
    with pytest.raises(InvalidArgument, match="holds 86401 occurrences"):
        beat.backfill("fast", at("2026-12-01T12:00:00+00:00"), at("2026-12-02T12:00:00+00:00"))
    assert publisher.messages == []


def test_backfill_refuses_a_window_before_pruned_history_naming_the_oldest_record(
    store: MemoryStore, publisher: CapturingPublisher, clock: Clock
) -> None:
    beat = make_beat(store, publisher, actor="cli:ops@box", durable_beat_history_keep=3)
    beat.upsert("report", MINUTELY)
    early = at("2026-12-01T09:00:00+00:00"), at("2026-12-01T09:10:00+00:00")
    clock.set("2026-12-01T10:00:30+00:00")
    assert beat.backfill("report", *early, dry_run=True).occurrences == 11  # nothing pruned yet
    minutes = [f"2026-12-01T10:0{m}:00+00:00" for m in range(1, 6)]
    run_rounds(store, clock, *minutes)
    store.prune_history(["report"], 3)  # what beat does between rounds
    with pytest.raises(
        InvalidArgument, match=r"pruned.*oldest record left is of 2026-12-01T10:03:00Z"
    ):
        beat.backfill("report", *early, dry_run=True)
    late = beat.backfill("report", at(minutes[2]), at(minutes[4]), dry_run=True)
    assert (late.occurrences, late.ticks) == (3, ())


@pytest.mark.parametrize(
    ("start", "end", "problem"),
    [
        ("2026-12-01T09:10:00+00:00", "2026-12-01T09:00:00+00:00", "--from is after --to"),
        ("2026-12-01T09:00:00+00:00", "2026-12-01T11:00:00+00:00", "is in the future"),
    ],
)
def test_backfill_refuses_a_reversed_or_future_window(
    beat: DurableBeat, start: str, end: str, problem: str
) -> None:
    beat.upsert("report", MINUTELY)
    with pytest.raises(InvalidArgument, match=problem):
        beat.backfill("report", at(start), at(end))


def test_backfill_keeps_to_the_schedule_bounds_and_needs_aware_instants(
    beat: DurableBeat, clock: Clock
) -> None:
    beat.upsert("report", {**MINUTELY, "start_at": "2026-12-01T09:58:00+00:00"})
    clock.set("2026-12-01T10:00:30+00:00")
    found = beat.backfill(
        "report", at("2026-12-01T09:50:00+00:00"), at("2026-12-01T10:00:00+00:00"), dry_run=True
    )
    assert [t.tick for t in found.ticks] == [
        "2026-12-01T09:58:00Z",
        "2026-12-01T09:59:00Z",
        "2026-12-01T10:00:00Z",
    ]
    with pytest.raises(InvalidArgument, match="with an offset"):
        beat.backfill("report", datetime(2026, 12, 1, 9), datetime.now(timezone.utc))


def test_backfill_skips_excluded_dates_and_covers_a_one_off(
    beat: DurableBeat, clock: Clock
) -> None:
    """Excluded dates are not occurrences (SPEC §15), for a backfill as for the planner; a
    one-off's single tick is its only occurrence."""
    daily = {"task": "proj.daily", "schedule": "0 6 * * *", "tz": "Pacific/Kiritimati"}
    beat.upsert("daily", {**daily, "exclude": ["2026-11-29"]})
    clock.set("2026-12-01T10:00:00+00:00")
    found = beat.backfill(
        "daily", at("2026-11-27T00:00:00+00:00"), at("2026-11-30T23:59:00+00:00"), dry_run=True
    )
    # 06:00 in Kiritimati (UTC+14) is 16:00 UTC the day before: the 29th's tick (28th, UTC)
    # is excluded.
    assert [t.tick for t in found.ticks] == [
        "2026-11-27T16:00:00Z",
        "2026-11-29T16:00:00Z",
        "2026-11-30T16:00:00Z",
    ]
    beat.upsert("once", {"task": "proj.once", "schedule": "@at 2026-12-01T09:30:00+00:00"})
    one = beat.backfill(
        "once", at("2026-12-01T09:00:00+00:00"), at("2026-12-01T10:00:00+00:00"), dry_run=True
    )
    assert [t.tick for t in one.ticks] == ["2026-12-01T09:30:00Z"]


def test_import_records_one_action_per_schedule_written(beat: DurableBeat) -> None:
    from celery_durable_beat.importers.base import PeerEntry, run_import

    entries = [
        PeerEntry("digest", {"task": "proj.digest", "schedule": "0 3 * * *"}),
        PeerEntry.refuse("solar", "solar schedules cannot be carried"),
    ]
    dry = run_import(beat, "redbeat", "redis://x", entries, dry_run=True, reason="move")
    assert [line.status for line in dry.lines] == ["created", "refused"]
    with pytest.raises(ScheduleNotFound):
        beat.actions("digest")  # a dry run writes nothing, the action log included
    run_import(beat, "redbeat", "redis://x", entries, dry_run=False, reason="leaving redbeat")
    run_import(beat, "redbeat", "redis://x", entries, dry_run=False, reason="again: unchanged")
    rows = [(a.actor, a.action, a.reason) for a in beat.actions("digest").actions]
    assert rows == [("cli:ops@box", "import", "leaving redbeat")]
