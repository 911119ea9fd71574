"""``DurableBeat(app)``: the Python control API every operator surface goes through (SPEC §8).

The CLI, the HTTP API and user code all call this class, so the rules live here once:

- **Validation as for config.** ``upsert`` runs the same validator as ``beat_schedule``, so a bad
  definition fails with the same message wherever it comes from.
- **Ownership.** A schedule declared in config belongs to config: an API upsert of its name is
  refused (``ScheduleConflict``); config sync in turn never touches an API schedule (§3).
- **Pause and resume plan from now.** Resuming never replays the ticks of an intentional pause;
  the next tick is the first occurrence after the store's clock. A quarantined schedule is resumed
  the same way.
- **Manual runs do not move the schedule.** ``trigger`` publishes one tick with trigger
  ``manual`` and a task id derived from the idempotency key; a key seen before returns the first
  run's task id with ``created`` false and publishes nothing, and is refused with other kwargs
  (``control/manual.py``).
- **The store's clock.** "Now" is the database's ``now_ms()``, as for the leader; read-only
  methods that look ahead take an explicit ``after`` so callers (and tests) control time.

Every method returns frozen values (``control/views.py``) whose ``to_json()`` gives exactly the
fields of SPEC §8.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol

from celery_durable_beat.backends import (
    make_lease_reader,
    make_publisher,
    make_store,
    make_worker_registry,
)
from celery_durable_beat.celery_config import (
    app_defaults,
    load_app_modules,
    register_custom_schedules,
    translate_entry,
)
from celery_durable_beat.clock import datetime_to_ms
from celery_durable_beat.control.actors import check_actor, check_reason, local_actor
from celery_durable_beat.control.backfill import plan_backfill, publish_backfill
from celery_durable_beat.control.details import schedule_detail, upcoming
from celery_durable_beat.control.lookups import (
    check_name,
    config_owned,
    refuse_archived,
    refuse_unplannable,
    shown_of,
)
from celery_durable_beat.control.manual import run_now
from celery_durable_beat.control.views import (
    ACTIONS_CURSOR,
    ActionsPage,
    ActionView,
    BackfillResult,
    EventView,
    HistoryPage,
    NextTick,
    ScheduleDetail,
    SchedulePage,
    ScheduleView,
    StatusView,
    TriggerResult,
    UpsertStatus,
    WorkerView,
    action_view,
    decode_cursor,
    encode_cursor,
    event_view,
    paused_by,
    schedule_view,
)
from celery_durable_beat.exceptions import (
    ConfigError,
    ConfigProblem,
    InvalidArgument,
    ScheduleNotFound,
)
from celery_durable_beat.ids import format_tick_instant, tick_task_id
from celery_durable_beat.model import (
    Definition,
    OperatorAction,
    ScheduleState,
    Source,
    StateReason,
)
from celery_durable_beat.policy import due_ms, first_tick, first_tick_ms
from celery_durable_beat.publish.base import Publisher
from celery_durable_beat.schedules.custom import CustomSpec
from celery_durable_beat.schedules.validate import validate_entry
from celery_durable_beat.settings import Settings
from celery_durable_beat.store.base import (
    ActionEntry,
    ControlStore,
    LeaderInfo,
    ScheduleRecord,
    UpsertOutcome,
)
from celery_durable_beat.store.rules import decide_upsert, stored_row

__all__ = [
    "ACTIONS_LIMIT",
    "COUNT_LIMIT",
    "ActionView",
    "ActionsPage",
    "BackfillResult",
    "DurableBeat",
    "EventView",
    "HISTORY_LIMIT",
    "HistoryPage",
    "LeaseHolder",
    "NextTick",
    "ScheduleDetail",
    "SchedulePage",
    "ScheduleView",
    "StatusView",
    "TriggerResult",
    "UpsertStatus",
    "WorkerRegistry",
    "WorkerView",
]

HISTORY_LIMIT = (1, 100)
"""Allowed ``history`` page sizes."""
PAUSED_BY_LOOKBACK = 20
"""Action rows ``get`` reads back to find the pause that holds a paused schedule."""
ACTIONS_LIMIT = (1, 100)
"""Allowed ``actions`` page sizes."""
PAGE_LIMIT = (1, 1000)
"""Allowed ``page`` sizes."""
COUNT_LIMIT = (1, 100)
"""Allowed ``next_ticks`` / ``get`` look-ahead counts."""


CUSTOM_NOT_BY_API = (
    "a custom schedule class is declared in beat_schedule (its ticks come from its code, "
    "which only the app's config holds); the API, the CLI and importers cannot carry it: add "
    "the entry to beat_schedule, or give a cron string, an RRULE or '@solar ...'"
)


class LeaseHolder(Protocol):
    """Reads who holds a lease kept outside the store (``backends.LeaseReader`` for Redis)."""

    def read(self) -> LeaderInfo:
        """Holder, epoch and expiry as the lease backend sees them now; takes nothing."""

    def close(self) -> None:
        """Release connections; idempotent."""


class SeenWorker(Protocol):
    """A worker as the registry last saw it (``runs.base.WorkerSeen``)."""

    @property
    def hostname(self) -> str: ...

    @property
    def queues(self) -> tuple[str, ...]: ...

    @property
    def last_seen_ms(self) -> int: ...


class WorkerRegistry(Protocol):
    """Reads the workers that announced themselves (the store's run tracking; ``MemoryRuns``)."""

    def live_workers(self, ttl_ms: int) -> Sequence[SeenWorker]:
        """Those seen within ``ttl_ms`` of the registry's now, ordered by hostname."""

    def close(self) -> None:
        """Release connections; idempotent."""


class DurableBeat:
    """Steer the schedules of a Celery app: read, change, pause, run now, audit.

    The store is built from ``app.conf`` on first use and its schema checked then (created on an
    empty database, refused when outdated), so constructing one is free. ``store``,
    ``publisher``, ``lease_reader`` and ``workers`` (where ``status`` reads live workers) may be
    injected, e.g. a ``CapturingPublisher`` or ``MemoryRuns`` in tests.

    Every change records an action row naming its ``actor`` (SPEC §15): by default
    ``python:<user>@<host>``; the CLI says ``cli:…``, and the HTTP surfaces pass each call's
    token name as ``actor=``. Each change takes an optional ``reason=`` (at most 500
    characters of one-line text), stored with it and shown by ``actions``, never logged.
    """

    def __init__(
        self,
        app: Any,
        *,
        store: ControlStore | None = None,
        publisher: Publisher | None = None,
        settings: Settings | None = None,
        lease_reader: LeaseHolder | None = None,
        workers: WorkerRegistry | None = None,
        actor: str | None = None,
    ) -> None:
        self.app = app
        self.actor = local_actor("python") if actor is None else check_actor(actor)
        self.settings = settings or Settings.from_conf(app.conf)
        self._store = store
        self._publisher = publisher
        self._reader = lease_reader
        self._workers = workers
        self._find_workers = workers is None  # made from the store on first use
        self._made_workers = False  # ... and then closed with this object
        self._schema_checked = False

    # -- plumbing -----------------------------------------------------------------------------
    @property
    def store(self) -> ControlStore:
        """The store, schema checked before the first use."""
        store = self._raw_store()
        if not self._schema_checked:
            store.ensure_schema()
            # The ticks of a custom schedule class come from the object in the app's config
            # (SPEC §18): the reads that compute them (next, show, the console) need it known.
            register_custom_schedules(self.app)
            self._schema_checked = True
        return store

    def _raw_store(self) -> ControlStore:
        if self._store is None:
            self._store = make_store(self.settings)
        return self._store

    @property
    def publisher(self) -> Publisher:
        """The publisher of manual runs and backfills, made on first use. Celery's
        ``send_task`` tells the result backend about each task, so the app's modules are
        loaded first (``load_app_modules``: a ``django-db`` backend needs Django set up)."""
        if self._publisher is None:
            load_app_modules(self.app)
            self._publisher = make_publisher(self.app, self.settings)
        return self._publisher

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
        if self._workers is not None and self._made_workers:
            self._workers.close()
        if self._store is not None:
            self._store.close()

    def __enter__(self) -> DurableBeat:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _require(self, name: str) -> ScheduleRecord:
        record = self.store.get(check_name(name))
        if record is None:
            raise ScheduleNotFound(name)
        return record

    def migrate(self) -> str:
        """Create or upgrade the schema (no schema check first: that is what it fixes)."""
        revision = self._raw_store().migrate()
        self._schema_checked = True
        return revision

    # -- reading ------------------------------------------------------------------------------
    def list(self) -> list[ScheduleView]:
        """Every schedule, archived ones included, ordered by name."""
        return [schedule_view(record) for record in self.store.list_schedules()]

    def page(
        self, contains: str = "", state: str | None = None, *, offset: int = 0, limit: int = 100
    ) -> SchedulePage:
        """``list`` one page at a time, filtered by name (case-insensitive text) and state.

        Reads only the page from the store: what a console showing 100 of 10,000 needs.
        """
        _check_range("limit", limit, PAGE_LIMIT)
        if offset < 0:
            raise InvalidArgument(f"offset must be 0 or more; got {offset!r}")
        try:
            wanted = None if state is None else ScheduleState(state)
        except ValueError:
            states = ", ".join(s.value for s in ScheduleState)
            raise InvalidArgument(f"state must be one of {states}; got {state!r}") from None
        store = self.store
        records, matched = store.page_schedules(contains, wanted, offset, limit)
        total = sum(store.counts_by_state().values())
        return SchedulePage(tuple(schedule_view(r) for r in records), matched, total)

    def get(self, name: str, *, count: int = 5, after: datetime | None = None) -> ScheduleDetail:
        """One schedule, flat: its attributes are the ``show --json`` fields (SPEC §8).

        ``overdue`` says what the next round fires when the stored tick is already past;
        ``next`` holds only ticks to come; ``args``, ``kwargs`` and ``options`` are redacted
        with ``durable_beat_redact``. With ``after``, ``next`` looks ahead from that instant.
        """
        _check_range("count", count, COUNT_LIMIT)
        record = self._require(name)
        detail = schedule_detail(
            record,
            now_ms=self.store.now_ms(),
            count=count,
            after_ms=None if after is None else datetime_to_ms(after),
            redact_keys=self.settings.redact,
        )
        if record.state is not ScheduleState.PAUSED or record.state_reason not in (
            None,
            StateReason.OPERATOR,
        ):
            return detail
        recent = self.store.actions(record.name, PAUSED_BY_LOOKBACK)
        return replace(detail, paused_by=paused_by(recent))

    def next_ticks(
        self, name: str, count: int = 5, *, after: datetime | None = None
    ) -> builtins.list[NextTick]:
        """The next ``count`` ticks (1..100) after ``after`` (default: now), with their task ids.

        Only ticks to come: an overdue schedule's due ticks are ``get(name).overdue``'s, and
        the list starts after the tick its policy fires next.
        """
        _check_range("count", count, COUNT_LIMIT)
        record = self._require(name)
        after_ms, now = None if after is None else datetime_to_ms(after), self.store.now_ms()
        shown = shown_of(record)  # a row that cannot be planned has no next ticks (show says why)
        none: builtins.list[int] = []
        ticks = shown.planned("next", lambda: upcoming(record, now, count, after_ms), none)
        texts = [(t, shown.instant("next", t)) for t in ticks]
        return [
            NextTick(t, text, tick_task_id(record.name, t, self.store.namespace))
            for t, text in texts
            if text
        ]

    def history(self, name: str, limit: int = 30, cursor: str | None = None) -> HistoryPage:
        """Audit events, newest first, ``limit`` (1..100) per page; readable after ``delete``."""
        _check_range("limit", limit, HISTORY_LIMIT)
        before_id = decode_cursor(cursor) if cursor is not None else None
        check_name(name)
        store = self.store
        found = store.history(name, limit + 1, before_id)
        if not found and cursor is None and store.get(name) is None:
            raise ScheduleNotFound(name)
        page = found[:limit]
        more = len(found) > limit
        return HistoryPage(
            events=tuple(event_view(e) for e in page),
            next_cursor=encode_cursor(page[-1].id) if more and page else None,
        )

    def status(self) -> StatusView:
        """Who leads at which fencing epoch, schedules by state, and how many are due now.

        The holder is read where the lease lives: Redis (``durable_beat_lease_url``, read-only)
        or the store's lease row. ``leader`` is None when no beat holds an unexpired lease.
        """
        store = self.store
        now = store.now_ms()
        info = store.leader_info()
        reader = self._lease_reader()
        if reader is not None:  # the Redis key expires by itself: a holder there is live
            held = reader.read()
            leader, expires = held.holder, held.expires_at_ms
            epoch = max(info.epoch, held.epoch)
        else:
            expires, epoch = info.expires_at_ms, info.epoch
            live = info.holder is not None and (expires is None or expires > now)
            leader = info.holder if live else None
        return StatusView(
            leader=leader,
            epoch=epoch,
            lease_expires_at=None if expires is None else format_tick_instant(expires),
            counts=store.counts_by_state(),
            due_backlog=store.due_backlog(now),
            now_ms=now,
            lease_expires_at_ms=expires,
            workers=self._live_workers(store),
            namespace=store.namespace,
        )

    def _live_workers(self, store: ControlStore) -> tuple[WorkerView, ...]:
        """Workers seen within ``durable_beat_worker_ttl`` (none without a registry)."""
        if self._find_workers:
            self._workers = make_worker_registry(store)
            self._find_workers, self._made_workers = False, True
        if self._workers is None:
            return ()
        seen = self._workers.live_workers(round(self.settings.worker_ttl * 1000))
        return tuple(
            WorkerView(
                hostname=w.hostname,
                queues=tuple(w.queues),
                last_seen=format_tick_instant(w.last_seen_ms),
                last_seen_ms=w.last_seen_ms,
            )
            for w in seen
        )

    def _lease_reader(self) -> LeaseHolder | None:
        if self._reader is None and self.settings.lease_url:
            self._reader = make_lease_reader(self.settings)
        return self._reader

    # -- changing -----------------------------------------------------------------------------
    def _record(
        self, action: OperatorAction, name: str, reason: str | None, actor: str | None
    ) -> None:
        """The action row of a change that happened (SPEC §15), pruned to the history keep."""
        who = self.actor if actor is None else check_actor(actor)
        entry = ActionEntry(who, action, name, reason)
        self.store.record_action(entry, self.settings.history_keep)

    def upsert(
        self,
        name: str,
        definition: Mapping[str, Any],
        *,
        dry_run: bool = False,
        reason: str | None = None,
        actor: str | None = None,
        action: OperatorAction = OperatorAction.UPSERT,
    ) -> UpsertStatus:
        """Create or change an API schedule from a ``beat_schedule``-style entry.

        Unchanged definitions move nothing; a changed one gets version + 1 and is re-planned from
        now (SPEC §3). Raises ConfigError (the config validator's messages) or ScheduleConflict
        when config declares that name. With ``dry_run`` nothing is written: the answer is what
        the upsert would do (``import --dry-run`` asks this way). A created or updated schedule
        records an ``action`` row (``import`` says ``OperatorAction.IMPORT``).
        """
        why = check_reason(reason)
        defaults = app_defaults(self.app, self.settings)
        valid = validate_entry(name, translate_entry(name, definition), defaults)
        if isinstance(valid.spec, CustomSpec):
            raise ConfigError([ConfigProblem(name, "schedule", CUSTOM_NOT_BY_API)])
        store = self.store
        existing = store.get(name)
        if existing is not None and existing.source is Source.CONFIG:
            raise config_owned(existing.name)
        if dry_run:
            return _would_upsert(existing, valid)
        now = store.now_ms()
        result = store.upsert(valid, Source.API, first_tick_ms(valid, now), now)
        if result.status is UpsertOutcome.CONFLICT:  # config sync created it since the read
            raise config_owned(result.name)
        if result.status is not UpsertOutcome.UNCHANGED:
            self._record(action, result.name, why, actor)
        return UpsertStatus(result.status.value)

    def pause(
        self, name: str, *, reason: str | None = None, actor: str | None = None
    ) -> ScheduleView:
        """Stop ticking until ``resume``; pausing a paused schedule changes nothing."""
        why = check_reason(reason)
        record = self._require(name)
        refuse_archived(record, "pause")
        if record.state is ScheduleState.PAUSED:
            return schedule_view(record)
        store = self.store
        paused = store.set_state(
            record.name, ScheduleState.PAUSED, store.now_ms(), reason=StateReason.OPERATOR
        )
        self._record(OperatorAction.PAUSE, record.name, why, actor)
        return schedule_view(paused)

    def resume(
        self, name: str, *, reason: str | None = None, actor: str | None = None
    ) -> ScheduleView:
        """Tick again from the first occurrence after now: the paused window is not replayed."""
        why = check_reason(reason)
        record = self._require(name)
        refuse_archived(record, "resume")
        if record.state is ScheduleState.ACTIVE:
            return schedule_view(record)
        refuse_unplannable(record, "resume")
        store = self.store
        now = store.now_ms()
        # Never at or before a tick that already fired (a skewed SQLite host clock, say).
        tick = first_tick(record.definition, max(now, record.last_tick_ms or now))
        due = None if tick is None else due_ms(record.name, record.definition, tick)
        updated = store.set_state(record.name, ScheduleState.ACTIVE, now, tick, due)
        self._record(OperatorAction.RESUME, record.name, why, actor)
        return schedule_view(updated)

    def archive(
        self, name: str, *, reason: str | None = None, actor: str | None = None
    ) -> ScheduleView:
        """Retire a schedule, history kept. A config schedule still in config comes back at the
        next config sync (SPEC §3): remove it from ``beat_schedule`` to retire it for good."""
        why = check_reason(reason)
        record = self._require(name)
        if record.state is ScheduleState.ARCHIVED:
            return schedule_view(record)
        store = self.store
        archived = store.set_state(record.name, ScheduleState.ARCHIVED, store.now_ms())
        self._record(OperatorAction.ARCHIVE, record.name, why, actor)
        return schedule_view(archived)

    def delete(self, name: str, *, reason: str | None = None, actor: str | None = None) -> None:
        """Remove the schedule; its history and its action log stay readable."""
        why = check_reason(reason)
        record = self._require(name)
        if not self.store.delete(record.name):
            raise ScheduleNotFound(name)
        self._record(OperatorAction.DELETE, record.name, why, actor)

    def trigger(
        self,
        name: str,
        kwargs: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        *,
        reason: str | None = None,
        actor: str | None = None,
    ) -> TriggerResult:
        """Run a schedule's task now, outside its plan (the next tick does not move).

        ``kwargs`` are merged over the definition's. With an ``idempotency_key`` the task id is
        derived from it, and a key whose run is already recorded returns that run with
        ``created`` False — unless that run was sent with other ``kwargs``: InvalidArgument
        (field ``kwargs``), since replaying it would silently drop the new ones. Raises
        PublishFailed when the broker refuses the message. A run sent records an action row.
        """
        why = check_reason(reason)
        record = self._require(name)
        result = run_now(self.store, self.publisher, record, kwargs, idempotency_key, self)
        if result.created:
            self._record(OperatorAction.TRIGGER, record.name, why, actor)
        return result

    def backfill(
        self,
        name: str,
        start: datetime,
        end: datetime,
        *,
        dry_run: bool = False,
        reason: str | None = None,
        actor: str | None = None,
    ) -> BackfillResult:
        """Publish, oldest first, every occurrence in ``[start, end]`` that has no ``enqueued``
        record, under the task id its automatic tick has or would have had (SPEC §15;
        ``control/backfill.py``). At most 1,000 occurrences; refused when the window reaches
        before pruned history or past now. ``dry_run`` lists them and sends nothing. Raises
        PublishFailed when the broker refuses (the batches sent before are recorded)."""
        why = check_reason(reason)
        start_ms, end_ms = _instant_ms("from", start), _instant_ms("to", end)
        record = self._require(name)
        store = self.store
        keep = self.settings.history_keep
        keep_setting = self.settings.names.of("history_keep")
        planned = plan_backfill(store, record, start_ms, end_ms, keep, keep_setting)
        if dry_run or not planned.ticks:  # nothing sent: nothing to record
            return replace(planned, dry_run=dry_run)
        publish_backfill(store, self.publisher, record, planned.ticks, self)
        self._record(OperatorAction.BACKFILL, record.name, why, actor)
        return replace(planned, dry_run=False)

    # -- who did what -------------------------------------------------------------------------
    def actions(
        self, name: str | None = None, limit: int = 30, cursor: str | None = None
    ) -> ActionsPage:
        """Operator actions newest first, of one schedule (also after it was deleted) or of
        all, ``limit`` (1..100) per page."""
        _check_range("limit", limit, ACTIONS_LIMIT)
        before_id = None if cursor is None else decode_cursor(cursor, ACTIONS_CURSOR)
        if name is not None:
            check_name(name)
        store = self.store
        found = store.actions(name, limit + 1, before_id)
        if name is not None and not found and cursor is None and store.get(name) is None:
            raise ScheduleNotFound(name)
        page = found[:limit]
        more = len(found) > limit and bool(page)
        return ActionsPage(
            actions=tuple(action_view(row) for row in page),
            next_cursor=encode_cursor(page[-1].id, ACTIONS_CURSOR) if more else None,
        )


# -- helpers (pure) ---------------------------------------------------------------------------
def _would_upsert(existing: ScheduleRecord | None, valid: Definition) -> UpsertStatus:
    """What ``AdminStore.upsert`` would answer: the same decision (``rules.decide_upsert``)
    against the row as read (the caller refused a config one already)."""
    row = None if existing is None else stored_row(existing)
    return UpsertStatus(decide_upsert(row, valid, Source.API, None).status.value)


def _instant_ms(label: str, value: object) -> int:
    """An aware datetime as epoch ms; InvalidArgument naming ``label`` otherwise."""
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise InvalidArgument(
            f"{label} must be an instant with an offset, e.g. 2026-12-01T03:00:00Z; got {value!r}",
            field=label,
        )
    return datetime_to_ms(value)


def _check_range(label: str, value: object, bounds: Sequence[int]) -> None:
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgument(f"{label} must be a whole number from {low} to {high}; got {value!r}")
