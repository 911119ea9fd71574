"""``durable-beat import``: schedules from django-celery-beat, sqlalchemy-celery-beat, RedBeat.

One module per peer reads the peer's real storage (its tables by SQL, RedBeat's hashes by
redis-py), never importing the peer; ``base.run_import`` carries the entries through
:class:`~celery_durable_beat.control.DurableBeat` like any API upsert (SPEC §12).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone

from celery_durable_beat.control import DurableBeat
from celery_durable_beat.control.actors import check_reason
from celery_durable_beat.importers import django_celery_beat, redbeat, sqlalchemy_celery_beat
from celery_durable_beat.importers.base import ImportLine, ImportReport, PeerEntry, run_import
from celery_durable_beat.urls import redact_url

__all__ = ["KINDS", "ImportLine", "ImportReport", "PeerEntry", "import_schedules", "read_entries"]

READERS: dict[str, Callable[[str, datetime], list[PeerEntry]]] = {
    django_celery_beat.KIND: django_celery_beat.read_entries,
    sqlalchemy_celery_beat.KIND: sqlalchemy_celery_beat.read_entries,
    redbeat.KIND: redbeat.read_entries,
}
KINDS = tuple(READERS)
"""The ``--from`` choices, as SPEC §12 spells them."""


def read_entries(kind: str, url: str, now: datetime | None = None) -> list[PeerEntry]:
    """The peer's entries, read in full before anything is written (an unreachable or empty
    source raises ImportSourceError here, so a failed import has written nothing)."""
    return READERS[kind](url, now or datetime.now(timezone.utc))


def import_schedules(
    beat: DurableBeat, kind: str, url: str, *, dry_run: bool = False, reason: str | None = None
) -> ImportReport:
    """Read the peer at ``url`` and upsert each entry it holds through ``beat``; each schedule
    written records an ``import`` action with ``reason`` (SPEC §15)."""
    check_reason(reason)  # refused before the peer is read, not once per entry
    entries = read_entries(kind, url)
    return run_import(beat, kind, redact_url(url), entries, dry_run=dry_run, reason=reason)
