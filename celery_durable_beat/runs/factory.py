"""Which runs backends a process uses: the one place that picks Redis or the store for claims.

Claims live in Redis when one is at hand: ``durable_beat_lease_url`` (any form
``redis_client`` takes, a sentinel URL with ``durable_beat_lease_transport_options``), else the
broker URL when it is ``redis://``/``rediss://``, or ``sentinel://`` with a ``master_name`` in
``broker_transport_options``; otherwise in the store, where a claim is its tick's run row. Run
tracking is always the store. The worker guard (``worker/hooks.py``) and the beat's overlap gate
(``wiring.make_gate``) both ask here, so a tick the gate revokes before it started is refused by
whichever worker receives it.

Both are built for the app's ``durable_beat_namespace`` (rule 9 of ``runs/base.py``): the beat's
gates read only its namespace's runs, a worker announces itself in its app's namespace, and a
worker's claims of a tick are the tick's namespace's whatever its app's, so one pool serves
several apps.

Building never connects: engines and clients connect on first use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from celery_durable_beat.redis_client import SentinelOptions, is_redis_url, scheme_of
from celery_durable_beat.runs.base import Runs
from celery_durable_beat.runs.sql import SqlRunStore
from celery_durable_beat.settings import Settings

_BROKER_SCHEMES = ("redis://", "rediss://")


def first_url(value: Any) -> str | None:
    """The first URL of a Celery URL setting (a string, a ``;``-separated list or a list); a
    sentinel URL whole, since its ``;``-separated parts are the sentinels of one master."""
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    if not isinstance(value, str) or not value.strip():
        return None
    if scheme_of(value) == "sentinel":
        return value.strip()
    return value.split(";")[0].strip()


def dedup_redis(app: Any, settings: Settings) -> tuple[str, Mapping[str, Any] | None] | None:
    """The Redis that holds claims and its transport options, or None for the store (see the
    module docstring)."""
    lease = first_url(settings.lease_url)
    if lease and is_redis_url(lease):
        return lease, settings.lease_transport_options
    broker = first_url(app.conf.get("broker_write_url")) or first_url(app.conf.get("broker_url"))
    if broker and broker.startswith(_BROKER_SCHEMES):
        return broker, None
    options = app.conf.get("broker_transport_options") or {}
    if broker and scheme_of(broker) == "sentinel" and SentinelOptions.pick(options):
        return broker, options
    return None


def dedup_redis_url(app: Any, settings: Settings) -> str | None:
    """The URL of ``dedup_redis``, for display and tests."""
    found = dedup_redis(app, settings)
    return found[0] if found else None


def make_tracking(store_url: str, namespace: str | None = None) -> SqlRunStore:
    """Run tracking on the store, reading ``namespace``'s runs and workers (None: the default;
    raises InvalidArgument for a URL the store cannot use)."""
    return SqlRunStore(store_url, namespace=namespace)


def make_runs(app: Any, settings: Settings, store_url: str) -> Runs:
    """Claims and tracking for ``app`` in ``settings.namespace``: Redis claims mirrored into the
    store, or the store's rows as both (``Runs.shared``)."""
    tracking = make_tracking(store_url, settings.namespace)
    found = dedup_redis(app, settings)
    if found is None:
        return Runs(claims=tracking, tracking=tracking)
    from celery_durable_beat.runs.redis import RedisClaims

    marker_ttl_ms = round(settings.dedup_ttl * 1000)
    claims = RedisClaims(*found, marker_ttl_ms=marker_ttl_ms, namespace=settings.namespace)
    return Runs(claims=claims, tracking=tracking)
