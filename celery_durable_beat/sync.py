"""Config sync (SPEC §3): desired definitions from ``beat_schedule`` → fenced bulk writes.

Names compare case-insensitively. An unchanged definition moves nothing (same version, same next
tick); a changed one gets version + 1 and is re-planned from now, and a tick it drops while due
is recorded ``skipped``/``replanned``; a config schedule that left the config is archived, never
deleted; one that comes back is re-activated. Schedules created through the API are never
touched, even when config names the same schedule: config sync reports that entry as ``ignored``.
Within a namespace (SPEC §16) sync archives only the config rows its own app (``app``, the
app's ``main`` name) keeps: a row another app's sync kept is left alone, and the first such row
seen is said in one WARNING naming both apps and ``durable_beat_namespace``.

Why in bulk and between renewals: one store call per entry cost ~2.7 ms on PostgreSQL, so a
config of 10,000 entries outlasted a 30 s lease. Now one read finds the differences (store rule
7: name, source, state and hash of every row) and only those are written, ``SYNC_BATCH`` per
fenced transaction, with ``renew`` called before each: a leader that lost its lease stops, and a
write under an epoch the store has seen superseded is refused (``StaleEpoch``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from celery_durable_beat.ids import name_key
from celery_durable_beat.logs import log_extra
from celery_durable_beat.model import Action, Definition, ScheduleState, Source
from celery_durable_beat.policy import first_tick_ms
from celery_durable_beat.schedules.spec import Timeline
from celery_durable_beat.store.base import ConfigChange, StoredDigest, SyncStore
from celery_durable_beat.store.rules import iter_chunks

log = logging.getLogger("celery_durable_beat.sync")

SYNC_BATCH = 500
"""Config differences written per transaction; the lease is renewed between two of them."""


@dataclass
class SyncReport:
    """Names by what sync did to them; ``complete`` is False when leadership ended it early."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    archived: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    complete: bool = True
    other_apps: list[str] = field(default_factory=list)
    """Apps other than this one whose config rows share the namespace: none archived."""


def differences(
    definitions: Sequence[Definition],
    stored: Sequence[StoredDigest],
    now_ms: int,
    app: str | None = None,
) -> tuple[list[ConfigChange], SyncReport]:
    """The changes to write, and the report of what needs none (unchanged, ignored). With
    ``app``, an unchanged row another app (or a release before namespaces) kept is sent as a
    change too, which writes nothing but the row's app."""
    report = SyncReport()
    rows = {name_key(digest.name): digest for digest in stored}
    wanted = {name_key(d.name): d for d in definitions}  # a later duplicate wins, as in a dict
    changes: list[ConfigChange] = []
    # Configs this large are generated: many entries share one schedule, and its first tick
    # after the same now is the same (planning a cron tick was a third of a first start).
    first_ticks: dict[tuple[Timeline, int | None, int | None], int | None] = {}
    for key, definition in wanted.items():
        row = rows.get(key)
        if row is not None and row.source is Source.CONFIG:
            _note_other_app(report, row, app)
        if row is not None and row.source is Source.API:
            report.ignored.append(definition.name)
        elif (
            row is not None
            and row.state is not ScheduleState.ARCHIVED
            and row.definition_hash == definition.definition_hash()
            and (app is None or row.app == app)
        ):
            report.unchanged.append(definition.name)
        else:
            shape = (definition.timeline, definition.start_at_ms, definition.end_at_ms)
            if shape not in first_ticks:
                first_ticks[shape] = first_tick_ms(definition, now_ms)
            first = first_ticks[shape]
            changes.append(ConfigChange(definition.name, definition, first))
    for key, row in sorted(rows.items()):
        if row.source is not Source.CONFIG or row.state is ScheduleState.ARCHIVED:
            continue
        if key in wanted:
            continue
        if _note_other_app(report, row, app):
            continue
        changes.append(ConfigChange(row.name))
    return changes, report


def _note_other_app(report: SyncReport, row: StoredDigest, app: str | None) -> bool:
    """Whether another app's sync kept ``row`` (then named once in ``report.other_apps``): two
    apps syncing into one namespace, which each should have its own (SPEC §16)."""
    if app is None or row.app is None or row.app == app:
        return False
    if row.app not in report.other_apps:
        report.other_apps.append(row.app)
    return True


def sync_definitions(
    store: SyncStore,
    definitions: Sequence[Definition],
    now_ms: int,
    *,
    epoch: int | None = None,
    renew: Callable[[], bool] | None = None,
    batch_size: int = SYNC_BATCH,
    app: str | None = None,
    namespace: str | None = None,
) -> SyncReport:
    """Make the store's config-sourced schedules match ``definitions``.

    ``epoch`` fences every write (beat passes its own); None takes the store's newest, for a
    one-off sync outside any election (tests, ``FrozenBeat``). ``renew`` is called before each
    batch and returns whether this beat still leads under that epoch; False stops the sync with
    ``complete`` False, to be run again by the next leader round. ``app`` is the syncing app's
    ``main`` name (None: every config row counts as this app's, as before namespaces) and
    ``namespace`` the one the store serves, for the warning about another app in it.
    """
    if epoch is None:
        epoch = store.leader_info().epoch
    stored = store.definition_digests([d.name for d in definitions])
    changes, report = differences(definitions, stored, now_ms, app)
    for batch in iter_chunks(changes, batch_size):
        if renew is not None and not renew():
            report.complete = False
            break
        for result in store.sync_config(batch, epoch, now_ms, app):
            getattr(report, result.status).append(result.name)
    _log(report)
    if report.other_apps:
        _warn_other_apps(report.other_apps, app, namespace)
    return report


def _warn_other_apps(others: Sequence[str], app: str | None, namespace: str | None) -> None:
    """One WARNING: another app syncs its config into this namespace, so neither may archive
    the other's schedules, and each may re-plan the other's (SPEC §16)."""
    shown = "the default namespace" if namespace is None else f"namespace {namespace!r}"
    log.warning(
        "%s also holds config schedules synced by app %s; this app is %r, so none of them is "
        "archived here: give each app its own durable_beat_namespace",
        shown,
        ", ".join(repr(other) for other in others),
        app,
        extra=log_extra(Action.SYNC, apps=[*others, app], namespace=namespace),
    )


def _log(report: SyncReport) -> None:
    log.info(
        "config sync%s: %d created, %d updated, %d unchanged, %d archived, %d ignored",
        "" if report.complete else " stopped (leadership ended)",
        len(report.created),
        len(report.updated),
        len(report.unchanged),
        len(report.archived),
        len(report.ignored),
        extra=log_extra(Action.SYNC),
    )
    for name in report.ignored:
        log.warning(
            'config entry "%s" ignored: a schedule of that name was created through '
            "the API; archive or delete it there to manage it from config",
            name,
            extra=log_extra(Action.SYNC, schedule=name),
        )
