"""The Python control API (``DurableBeat``) on the in-memory store.

Time is controlled where the answer depends on it: look-ahead takes ``after=``, dispatch rounds
take ``now_ms``; only "now" for pause/resume/upsert is the store's clock, as in production. The
store calls it makes are held to the SQL stores' behaviour by the store contract suite; what
needs a database of its own (the schema made on first use) is in
``tests/integration/test_control.py``.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
from celery import Celery

from celery_durable_beat import DurableBeat
from celery_durable_beat.celery_config import definitions_from_app
from celery_durable_beat.cli.format import status_lines
from celery_durable_beat.control import ScheduleView, UpsertStatus
from celery_durable_beat.control.views import EVENT_FIELDS, LIST_FIELDS
from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.exceptions import (
    ConfigError,
    InvalidArgument,
    PublishFailed,
    ScheduleConflict,
    ScheduleNotFound,
)
from celery_durable_beat.ids import manual_task_id
from celery_durable_beat.model import Reason, ScheduleState, Trigger
from celery_durable_beat.publish.capturing import CapturingPublisher
from celery_durable_beat.runs.memory import MemoryRuns
from celery_durable_beat.settings import Settings
from celery_durable_beat.store.base import Store
from celery_durable_beat.sync import sync_definitions
from celery_durable_beat.testing import MemoryStore
from celery_durable_beat.web.schemas import StatusOut, WorkerOut

pytestmark = pytest.mark.unit

APP_URL = "sqlite:///never-opened.sqlite3"
"""The app's store setting; the tests inject their store, so nothing opens it."""

SPEC_LIST_FIELDS = {
    "name",
    "task",
    "schedule",
    "tz",
    "missed",
    "backfill_max",
    "overlap",
    "jitter",
    "state",
    "version",
    "source",
    "next_tick",
    "next_tick_ms",
    "last_tick_ms",
    "last_outcome",
    # SPEC §2's schedule keys (null when unset) and why a paused schedule is paused
    "start_at",
    "end_at",
    "expires",
    "pause_on_failure",
    "require_worker",
    "state_reason",
    "buffered_tick",
    # SPEC §15: what kind of schedule (an @at is "at"), and its exclusion dates as written
    "kind",
    "exclude",
}
SPEC_EVENT_FIELDS = {
    "schedule",
    "tick_ms",
    "task_id",
    "trigger",
    "outcome",
    "reason",
    "lag_ms",
    "version",
    "recorded_at",
    "run_state",
}
FAST = {"task": "proj.pulse", "schedule": "@every:100", "missed": "backfill", "backfill_max": 1000}
PULSE = {
    "task": "proj.pulse",
    "schedule": "@every 1s",
    "missed": "backfill",
    "backfill_max": 1000,
    "kwargs": {"at": "{{scheduled_for}}", "n": 1},
}


def make_app(url: str, beat_schedule: dict[str, Any] | None = None) -> Celery:
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(
        timezone="Europe/Berlin", durable_beat_url=url, beat_schedule=beat_schedule or {}
    )
    return app


@pytest.fixture
def leader_epoch() -> int:
    return 1


@pytest.fixture
def publisher() -> CapturingPublisher:
    return CapturingPublisher()


@pytest.fixture
def beat(store: Store, publisher: CapturingPublisher) -> DurableBeat:
    return DurableBeat(make_app(APP_URL), store=store, publisher=publisher)


def dispatch_at(store: Store, now_ms: int) -> CapturingPublisher:
    """One real leader round at ``now_ms``; returns what it published."""
    captured = CapturingPublisher()
    Dispatcher(store, captured, batch_size=100).run_round(now_ms, epoch=1)
    return captured


# -- upsert -----------------------------------------------------------------------------------
def test_upsert_created_unchanged_updated_with_versions(beat: DurableBeat) -> None:
    assert beat.upsert("pulse", PULSE) == "created"
    first = beat.get("pulse")
    assert (first.version, first.source, first.state) == (1, "api", "active")
    assert beat.upsert("PULSE", dict(PULSE)) is UpsertStatus.UNCHANGED
    assert beat.get("pulse").next_tick_ms == first.next_tick_ms
    assert beat.upsert("pulse", {**PULSE, "schedule": "@every 2s"}) == "updated"
    assert beat.get("pulse").version == 2


def test_upsert_plans_the_first_tick_after_the_store_clock(beat: DurableBeat, store: Store) -> None:
    before = store.now_ms()
    beat.upsert("pulse", PULSE)
    next_ms = beat.get("pulse").next_tick_ms
    assert next_ms is not None
    assert before < next_ms <= store.now_ms() + 1000


def test_upsert_reports_the_config_validators_messages(beat: DurableBeat) -> None:
    bad = {"task": "proj.x", "schedule": "0 3 * * *", "tz": "Bogota", "missd": "skip"}
    with pytest.raises(ConfigError) as from_api:
        beat.upsert("nightly", bad)
    app = make_app(APP_URL, {"nightly": bad})
    with pytest.raises(ConfigError) as from_config:
        definitions_from_app(app, Settings.from_conf(app.conf, environ={}))
    assert [str(p) for p in from_api.value.problems] == [str(p) for p in from_config.value.problems]
    assert 'tz "Bogota" is not an IANA zone; use e.g. "America/Bogota"' in str(from_api.value)


def test_upsert_of_a_config_schedule_is_refused(beat: DurableBeat, store: Store) -> None:
    app = make_app(APP_URL, {"nightly": {"task": "proj.digest", "schedule": "0 3 * * *"}})
    sync_definitions(store, definitions_from_app(app, Settings.from_conf(app.conf)), store.now_ms())
    with pytest.raises(ScheduleConflict, match="comes from beat_schedule"):
        beat.upsert("Nightly", {"task": "proj.other", "schedule": "0 4 * * *"})
    beat.delete("nightly")  # the documented way to take it over
    assert beat.upsert("nightly", {"task": "proj.other", "schedule": "0 4 * * *"}) == "created"
    assert beat.get("nightly").source == "api"


# -- pause / resume / archive / delete --------------------------------------------------------
def test_pause_stops_ticks_and_resume_does_not_replay(publisher: CapturingPublisher) -> None:
    """On a manual clock: where "now" falls between two 100 ms ticks never matters."""
    clock = [1_796_000_000_050]  # between two ticks of FAST on purpose
    store = MemoryStore(clock=lambda: clock[0])
    store.register_epoch(1)
    beat = DurableBeat(make_app(APP_URL), store=store, publisher=publisher)
    beat.upsert("pulse", FAST)
    clock[0] += 350
    assert dispatch_at(store, store.now_ms()).messages  # it ticks
    paused = beat.pause("pulse")
    assert (paused.state, paused.next_tick, paused.next_tick_ms) == ("paused", None, None)
    assert beat.pause("pulse").state == "paused"  # idempotent
    clock[0] += 500  # the paused window: five ticks
    assert dispatch_at(store, store.now_ms() + 60_000).messages == []
    resume_from = store.now_ms()
    resumed = beat.resume("pulse")
    assert resumed.state == "active"
    assert resumed.next_tick_ms == resume_from - resume_from % 100 + 100  # the next, no replay
    fired = [m.tick_ms for m in dispatch_at(store, resumed.next_tick_ms + 250).messages]
    assert fired == [resumed.next_tick_ms + step for step in (0, 100, 200)]


def test_resume_never_plans_at_or_before_a_fired_tick(beat: DurableBeat, store: Store) -> None:
    """A tick fired by a host whose clock ran ahead is not planned a second time."""
    beat.upsert("pulse", PULSE)
    last = dispatch_at(store, store.now_ms() + 3000).messages[-1].tick_ms
    beat.pause("pulse")
    assert beat.resume("pulse").next_tick_ms == last + 1000


def test_resume_of_a_quarantined_schedule_plans_from_now(beat: DurableBeat, store: Store) -> None:
    beat.upsert("pulse", PULSE)
    store.set_state("pulse", ScheduleState.QUARANTINED, store.now_ms(), next_tick_ms=1000)
    assert beat.list()[0].state == "quarantined"
    now = store.now_ms()
    resumed = beat.resume("pulse")
    assert resumed.state == "active"
    assert resumed.next_tick_ms is not None
    assert resumed.next_tick_ms > now


def test_resume_of_an_active_schedule_moves_nothing(beat: DurableBeat) -> None:
    beat.upsert("pulse", PULSE)
    before = beat.get("pulse")
    assert beat.resume("pulse").next_tick_ms == before.next_tick_ms


def test_archive_then_resume_is_refused_and_upsert_reactivates(beat: DurableBeat) -> None:
    beat.upsert("pulse", PULSE)
    archived = beat.archive("pulse")
    assert (archived.state, archived.next_tick) == ("archived", None)
    with pytest.raises(ScheduleConflict, match="archived; upsert it again"):
        beat.resume("pulse")
    with pytest.raises(ScheduleConflict):
        beat.pause("pulse")
    assert beat.upsert("pulse", PULSE) == "updated"
    assert beat.get("pulse").state == "active"


def test_delete_keeps_history(beat: DurableBeat, store: Store) -> None:
    beat.upsert("pulse", PULSE)
    dispatch_at(store, store.now_ms() + 3000)
    events = beat.history("pulse").events
    assert events
    beat.delete("pulse")
    with pytest.raises(ScheduleNotFound):
        beat.get("pulse")
    assert beat.history("pulse").events == events
    with pytest.raises(ScheduleNotFound):
        beat.delete("pulse")


@pytest.mark.parametrize(
    "verb", ["get", "pause", "resume", "archive", "next_ticks", "history", "trigger"]
)
def test_unknown_names_raise_a_lookup_error_naming_them(beat: DurableBeat, verb: str) -> None:
    with pytest.raises(LookupError, match='"no-such-thing"'):
        getattr(beat, verb)("no-such-thing")


# -- trigger ----------------------------------------------------------------------------------
def test_trigger_same_key_runs_once(
    beat: DurableBeat, store: Store, publisher: CapturingPublisher
) -> None:
    beat.upsert("pulse", PULSE)
    next_before = beat.get("pulse").next_tick_ms
    first = beat.trigger("pulse", idempotency_key="deploy-42")
    again = beat.trigger("Pulse", idempotency_key="deploy-42")
    assert first.created
    assert not again.created
    assert first.task_id == again.task_id == manual_task_id("pulse", "deploy-42")
    assert len(publisher.messages) == 1
    assert beat.get("pulse").next_tick_ms == next_before  # the plan does not move
    (event,) = beat.history("pulse").events
    assert (event.trigger, event.outcome, event.task_id) == ("manual", "enqueued", first.task_id)


def test_trigger_merges_kwargs_and_fills_placeholders_from_now(
    beat: DurableBeat, store: Store, publisher: CapturingPublisher
) -> None:
    beat.upsert("pulse", PULSE)
    before = store.now_ms()
    result = beat.trigger("pulse", kwargs={"n": 2, "extra": True})
    (message,) = publisher.messages
    assert message.trigger is Trigger.MANUAL
    assert message.task_id == result.task_id
    assert message.kwargs["n"] == 2
    assert message.kwargs["extra"] is True
    assert before <= message.tick_ms <= store.now_ms()
    assert message.kwargs["at"].startswith(
        datetime.fromtimestamp(message.tick_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M")
    )
    assert beat.trigger("pulse").task_id != result.task_id  # no key: a new run each time


def test_trigger_records_at_the_current_fencing_epoch(beat: DurableBeat, store: Store) -> None:
    beat.upsert("pulse", PULSE)
    store.register_epoch(7)
    result = beat.trigger("pulse", idempotency_key="k")
    stored = store.find_enqueued(result.task_id)
    assert stored is not None
    assert stored.epoch == 7


def test_trigger_publish_failure_raises_and_is_audited(
    beat: DurableBeat, publisher: CapturingPublisher
) -> None:
    beat.upsert("pulse", PULSE)
    publisher.fail_with = Reason.BROKER_UNAVAILABLE
    with pytest.raises(PublishFailed, match="broker_unavailable"):
        beat.trigger("pulse", idempotency_key="k")
    (event,) = beat.history("pulse").events
    assert (event.outcome, event.reason) == ("failed", "broker_unavailable")
    publisher.fail_with = None
    assert beat.trigger("pulse", idempotency_key="k").created  # a failed run can be retried


@pytest.mark.parametrize("kwargs", [{"x": object()}, {1: "x"}, {"x": float("nan")}])
def test_trigger_rejects_kwargs_that_are_not_json(beat: DurableBeat, kwargs: Any) -> None:
    beat.upsert("pulse", PULSE)
    with pytest.raises(InvalidArgument):
        beat.trigger("pulse", kwargs=kwargs)


# -- history ----------------------------------------------------------------------------------
def test_history_pages_are_disjoint_newest_first(beat: DurableBeat, store: Store) -> None:
    beat.upsert("pulse", PULSE)
    dispatch_at(store, store.now_ms() + 25_000)
    every = beat.history("pulse", limit=100).events
    assert len(every) >= 25
    seen, cursor, pages = [], None, 0
    while True:
        page = beat.history("pulse", limit=10, cursor=cursor)
        seen.extend(page.events)
        pages += 1
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == list(every)
    assert pages == -(-len(every) // 10)
    ids = [e.id for e in seen]
    assert ids == sorted(ids, reverse=True)
    assert len(set(ids)) == len(ids)
    assert set(every[0].to_json()) == SPEC_EVENT_FIELDS == set(EVENT_FIELDS)
    assert every[0].recorded_at.endswith("Z")


@pytest.mark.parametrize("limit", [0, 101, -1, True])
def test_history_limit_out_of_range(beat: DurableBeat, limit: int) -> None:
    with pytest.raises(InvalidArgument, match="1 to 100"):
        beat.history("pulse", limit=limit)


@pytest.mark.parametrize("cursor", ["garbage!", "aDEuMA", "", "eHl6"])
def test_history_rejects_cursors_it_did_not_give(beat: DurableBeat, cursor: str) -> None:
    beat.upsert("pulse", PULSE)
    with pytest.raises(InvalidArgument, match="cursor"):
        beat.history("pulse", cursor=cursor)


# -- reading ----------------------------------------------------------------------------------
def test_next_ticks_across_spring_forward(beat: DurableBeat) -> None:
    beat.upsert("nyc", {"task": "proj.x", "schedule": "30 2 * * *", "tz": "America/New_York"})
    after = datetime(2026, 3, 6, 12, tzinfo=timezone.utc)
    ticks = [t.tick for t in beat.next_ticks("nyc", 4, after=after)]
    assert ticks == [
        "2026-03-07T02:30:00-05:00",
        "2026-03-08T03:00:00-04:00",  # 02:30 does not exist that day: first instant after the gap
        "2026-03-09T02:30:00-04:00",
        "2026-03-10T02:30:00-04:00",
    ]
    detail = beat.get("nyc", count=2, after=after)
    assert detail.description == "at 02:30 every day (America/New_York)"
    assert detail.to_json()["next"] == ticks[:2]
    assert beat.next_ticks("nyc", 1, after=after)[0].task_id == "nyc@2026-03-07T07:30:00Z"


def test_next_ticks_after_an_overdue_tick_are_only_future(beat: DurableBeat, store: Store) -> None:
    """A tick beat has not fired yet (beat down, say) is ``get().overdue``, not a "next" tick."""
    hour = 3_600_000
    beat.upsert("pulse", {**PULSE, "schedule": "@every 1h"})
    now = store.now_ms()
    overdue = (now // hour - 2) * hour
    store.set_state("pulse", ScheduleState.ACTIVE, now, next_tick_ms=overdue, next_due_ms=overdue)
    ticks = [t.tick_ms for t in beat.next_ticks("pulse", 3)]
    later = store.now_ms()  # an hour may begin meanwhile: bound by the clock on each side
    hours = range(now // hour, later // hour + 1)
    assert ticks in [[(h + n) * hour for n in (1, 2, 3)] for h in hours]
    detail = beat.get("pulse")
    missed = detail.overdue.missed if detail.overdue is not None else None
    assert missed is not None and 3 <= missed <= 3 + store.now_ms() // hour - now // hour


@pytest.mark.parametrize("count", [0, 101])
def test_next_ticks_count_out_of_range(beat: DurableBeat, count: int) -> None:
    beat.upsert("pulse", PULSE)
    with pytest.raises(InvalidArgument):
        beat.next_ticks("pulse", count)


def test_list_items_have_exactly_the_spec_fields(beat: DurableBeat) -> None:
    beat.upsert("b-second", {"task": "proj.x", "schedule": "0 3 * * *", "tz": "Asia/Tokyo"})
    beat.upsert("a-first", PULSE)
    views = beat.list()
    assert [v.name for v in views] == ["a-first", "b-second"]
    item = views[1].to_json()
    assert set(item) == SPEC_LIST_FIELDS == set(LIST_FIELDS)
    assert item["schedule"] == "0 3 * * *"
    assert item["tz"] == "Asia/Tokyo"
    assert item["next_tick"].endswith("+09:00")
    assert item["next_tick"][11:16] == "03:00"
    assert isinstance(views[0], ScheduleView)
    assert views[0].to_json()["schedule"] == "@every 1s"
    assert views[0].tz == "UTC"


def test_status(beat: DurableBeat, store: Store) -> None:
    beat.upsert("pulse", {**PULSE, "schedule": "@every 1h"})
    beat.upsert("other", PULSE)
    beat.pause("other")
    status = beat.status()
    assert status.to_json() == {
        "namespace": None,
        "leader": None,
        "epoch": 1,
        "lease_expires_at": None,
        "counts": {"active": 1, "paused": 1, "archived": 0, "quarantined": 0},
        "due_backlog": 0,
        "workers": [],  # a memory store has no worker registry
    }


class SharedClock:
    """One clock for the store and the in-memory runs, moved by hand."""

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def now_ms(self) -> int:
        return self.ms

    def monotonic(self) -> float:
        return self.ms / 1000


def test_status_lists_live_workers_by_hostname() -> None:
    clock = SharedClock(1_780_000_000_000)
    app = make_app(APP_URL)
    app.conf.durable_beat_worker_ttl = 30
    runs = MemoryRuns(clock)
    beat = DurableBeat(app, store=MemoryStore(clock=clock.now_ms), workers=runs)
    runs.announce_worker("silent@host", ["celery"])
    clock.ms += 10_000
    runs.announce_worker("w2@host", ["reports", "celery"])
    runs.announce_worker("w1@host", [])
    runs.announce_worker("gone@host", ["celery"])
    runs.forget_worker("gone@host")
    clock.ms += 20_500  # silent@host was last seen 30.5 s ago: past the 30 s TTL
    seen = beat.status()
    assert seen.to_json()["workers"] == [
        {"hostname": "w1@host", "queues": [], "last_seen": "2026-05-28T20:26:50Z"},
        {
            "hostname": "w2@host",
            "queues": ["reports", "celery"],
            "last_seen": "2026-05-28T20:26:50Z",
        },
    ]
    assert set(StatusOut.model_fields) == set(seen.to_json())  # the HTTP API's schema
    assert set(WorkerOut.model_fields) == set(seen.to_json()["workers"][0])
    lines = status_lines(seen)
    workers = [line.split()[1] for line in lines if line.startswith("worker ")]
    assert workers == ["w1@host", "w2@host"]
    assert any("queues reports, celery" in line for line in lines)
    beat.close()
    runs.announce_worker("w1@host", ["celery"])  # an injected registry is not closed


def test_an_idempotency_key_reused_with_other_kwargs_is_refused(
    beat: DurableBeat, store: Store
) -> None:
    beat.upsert("pulse", PULSE)
    first = beat.trigger("pulse", kwargs={"a": 1, "b": [2]}, idempotency_key="k")
    again = beat.trigger("pulse", kwargs={"b": [2], "a": 1}, idempotency_key="k")
    assert first.created and not again.created and again.task_id == first.task_id
    with pytest.raises(InvalidArgument, match="idempotency key") as caught:
        beat.trigger("pulse", kwargs={"a": 2, "b": [2]}, idempotency_key="k")
    assert caught.value.field == "kwargs"
    with pytest.raises(InvalidArgument):
        beat.trigger("pulse", idempotency_key="k")  # no kwargs is another body too
    stored = store.find_enqueued(first.task_id)
    assert stored is not None and set(stored.detail) == {"kwargs_digest"}  # a digest, no payload
    assert len(stored.detail["kwargs_digest"]) == 64
    assert beat.trigger("pulse", kwargs={"a": 2}, idempotency_key="k2").created
