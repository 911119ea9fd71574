"""Stores for tests: one builder for every backend, and fault injection around the real store.

``open_store`` is what the shared fixtures of ``tests/conftest.py`` build each backend with. The
fault wrappers are how the tests prove the round order (publish → audit → advance): they make
exactly one step fail, then let the next round run against the very same store.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from celery_durable_beat.store.base import Advance, AuditEvent, Claim, Store
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


class _FailingClaim:
    def __init__(self, inner: Claim) -> None:
        self._inner = inner
        self.schedules = inner.schedules

    def enqueued_task_ids(self, task_ids: Sequence[str]) -> set[str]:
        return self._inner.enqueued_task_ids(task_ids)

    def record(self, events: Sequence[AuditEvent], epoch: int) -> None:
        raise InjectedFault("audit write failed")


class _Faults:
    """Makes the next audit write or advance of the store it is mixed into fail once."""

    fail_audit_once = False
    fail_advance_once = False

    @contextmanager
    def claim_due(self, now_ms: int, limit: int) -> Iterator[Any]:
        with super().claim_due(now_ms, limit) as claim:  # type: ignore[misc]
            if self.fail_audit_once and claim.schedules:
                self.fail_audit_once = False
                yield _FailingClaim(claim)
            else:
                yield claim

    def advance(self, advances: Sequence[Advance], epoch: int) -> list[bool]:
        if self.fail_advance_once and advances:
            self.fail_advance_once = False
            raise InjectedFault("crash between audit and advance")
        return super().advance(advances, epoch)  # type: ignore[misc, no-any-return]


class FaultyStore(_Faults, SqlStore):
    """A SqlStore whose next audit write or advance fails once, on request."""


class FaultyMemoryStore(_Faults, MemoryStore):
    """A MemoryStore whose next audit write or advance fails once, on request."""
