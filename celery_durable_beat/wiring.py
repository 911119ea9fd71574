"""Concrete backends from settings: the one place that picks SQL, Redis or a sole lease."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery_durable_beat.dispatch import TickMessage
from celery_durable_beat.lease.base import Lease
from celery_durable_beat.model import Reason
from celery_durable_beat.settings import Settings
from celery_durable_beat.store.base import DueSchedule, Store


def make_store(settings: Settings) -> Store:
    from celery_durable_beat.store.sql import SqlStore

    return SqlStore(settings.url)


def make_lease(settings: Settings, store: Store) -> Lease:
    """The Redis lease when ``durable_beat_lease_url`` is set, else the store's lease row."""
    from celery_durable_beat.lease.base import SoleLease

    return SoleLease(ttl_seconds=settings.lease_ttl)


Gate = Callable[[DueSchedule, TickMessage], Reason | None]


def make_gate(app: Any, settings: Settings, store: Store) -> Gate | None:
    """The overlap gate of the round (SPEC §6); None while no schedule needs one."""
    return None
