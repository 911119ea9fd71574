"""Config sync (SPEC §3): desired definitions from ``beat_schedule`` → upserts in the store.

Names compare case-insensitively. An unchanged definition moves nothing (same version, same next
tick); a changed one gets version + 1 and is re-planned from now; a config schedule that left the
config is archived, never deleted; one that comes back is re-activated. Schedules created through
the API are never touched, even when config names the same schedule: config sync reports that
entry as ``ignored`` instead.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from celery_durable_beat.model import Action, Definition, Source
from celery_durable_beat.schedules.occurrences import next_tick
from celery_durable_beat.store.base import Store

log = logging.getLogger("celery_durable_beat.sync")


@dataclass
class SyncReport:
    """Names by what sync did to them."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    archived: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)


def first_tick_ms(definition: Definition, now_ms: int) -> int:
    """Where a new or changed schedule starts: its first tick after now."""
    return next_tick(definition.spec, now_ms)


def sync_definitions(store: Store, definitions: Sequence[Definition], now_ms: int) -> SyncReport:
    """Make the store's config-sourced schedules match ``definitions``."""
    report = SyncReport()
    for definition in definitions:
        existing = store.get(definition.name)
        if existing is not None and existing.source is Source.API:
            report.ignored.append(definition.name)
            continue
        result = store.upsert(definition, Source.CONFIG, first_tick_ms(definition, now_ms), now_ms)
        getattr(report, result.status).append(definition.name)
    report.archived = store.archive_missing([d.name for d in definitions], Source.CONFIG, now_ms)
    log.info(
        "config sync: %d created, %d updated, %d unchanged, %d archived, %d ignored",
        len(report.created),
        len(report.updated),
        len(report.unchanged),
        len(report.archived),
        len(report.ignored),
        extra={"action": Action.SYNC.value},
    )
    for name in report.ignored:
        log.warning(
            'config entry "%s" ignored: a schedule of that name was created through '
            "the API; archive or delete it there to manage it from config",
            name,
            extra={"action": Action.SYNC.value, "schedule": name},
        )
    return report
