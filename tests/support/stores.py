"""Stores for tests: one builder for every backend, and fault injection around the real store.

``open_store`` is what the shared fixtures of ``tests/conftest.py`` build each backend with. The
fault wrappers are how the tests prove the round order (publish → audit → advance): they make
exactly one step fail, then let the next round run against the very same store.
"""

from __future__ import annotations

from collections.abc import Sequence

from celery_durable_beat.store.base import Advance, AuditEvent, Store
from celery_durable_beat.store.memory import MemoryStore
from celery_durable_beat.store.sql import SqlStore


def open_store(kind: str, url: str | None = None) -> Store:
    """A fresh store of ``kind`` (``sqlite``/``postgresql`` on ``url``, or ``memory``), schema
    ready."""
    store: Store = MemoryStore() if kind == "memory" else SqlStore(str(url))
    store.ensure_schema()
    return store


class InjectedFault(RuntimeError):
    """The failure a test asked for."""


class _Faults:
    """Makes the next settle (the round's audit write and advance) of the store it is mixed into
    fail once, on request: before anything is written (``fail_audit_once``), or with the audit
    records written and the advance lost (``fail_advance_once``: what a write that lost its
    compare-and-set leaves, or a crash between the two did before they shared a transaction)."""

    fail_audit_once = False
    fail_advance_once = False

    def settle(
        self, events: Sequence[AuditEvent], advances: Sequence[Advance], epoch: int
    ) -> list[bool]:
        if self.fail_audit_once and events:
            self.fail_audit_once = False
            raise InjectedFault("audit write failed")
        if self.fail_advance_once and advances:
            self.fail_advance_once = False
            super().settle(events, (), epoch)  # type: ignore[misc]
            raise InjectedFault("crash between audit and advance")
        return super().settle(events, advances, epoch)  # type: ignore[misc, no-any-return]


class FaultyStore(_Faults, SqlStore):
    """A SqlStore whose next audit write or advance fails once, on request."""


class FaultyMemoryStore(_Faults, MemoryStore):
    """A MemoryStore whose next audit write or advance fails once, on request."""
