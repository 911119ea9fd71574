"""Which runs backends a process uses: the one place that picks Redis or the store for claims.

Claims live in Redis when one is at hand: ``durable_beat_lease_url`` when it is
``redis://``/``rediss://``, else the broker URL when it is; otherwise in the store, where a claim
is its tick's run row. Run tracking is always the store. The worker guard (``worker/hooks.py``)
and the beat's overlap gate (``wiring.make_gate``) both ask here, so a tick the gate revokes
before it started is refused by whichever worker receives it.

Building never connects: engines and clients connect on first use.
"""

from __future__ import annotations

from typing import Any

from celery_durable_beat.runs.base import Runs
from celery_durable_beat.runs.sql import SqlRunStore
from celery_durable_beat.settings import Settings

_REDIS_SCHEMES = ("redis://", "rediss://")


def first_url(value: Any) -> str | None:
    """The first URL of a Celery URL setting (a string, a ``;``-separated list or a list)."""
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    if not isinstance(value, str) or not value.strip():
        return None
    return value.split(";")[0].strip()


def dedup_redis_url(app: Any, settings: Settings) -> str | None:
    """The Redis that holds claims, or None for the store (see the module docstring)."""
    broker = first_url(app.conf.get("broker_write_url")) or first_url(app.conf.get("broker_url"))
    for url in (first_url(settings.lease_url), broker):
        if url and url.startswith(_REDIS_SCHEMES):
            return url
    return None


def make_tracking(store_url: str) -> SqlRunStore:
    """Run tracking on the store (raises InvalidArgument for a URL the store cannot use)."""
    return SqlRunStore(store_url)


def make_runs(app: Any, settings: Settings, store_url: str) -> Runs:
    """Claims and tracking for ``app``: Redis claims mirrored into the store, or the store's
    rows as both (``Runs.shared``)."""
    tracking = make_tracking(store_url)
    url = dedup_redis_url(app, settings)
    if url is None:
        return Runs(claims=tracking, tracking=tracking)
    from celery_durable_beat.runs.redis import RedisClaims

    return Runs(claims=RedisClaims(url), tracking=tracking)
