"""Fault injection around the real store: the real SQL underneath, a failure where we say.

These wrappers are how the tests prove the round order (publish → audit → advance): they make
exactly one step fail, then let the next round run against the very same database.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from celery_durable_beat.store.base import Advance, AuditEvent, Claim
from celery_durable_beat.store.sql import SqlStore


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


class FaultyStore(SqlStore):
    """A SqlStore whose next audit write or advance fails once, on request."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.fail_audit_once = False
        self.fail_advance_once = False

    @contextmanager
    def claim_due(self, now_ms: int, limit: int) -> Iterator[Any]:
        with super().claim_due(now_ms, limit) as claim:
            if self.fail_audit_once and claim.schedules:
                self.fail_audit_once = False
                yield _FailingClaim(claim)
            else:
                yield claim

    def advance(self, advances: Sequence[Advance], epoch: int) -> list[bool]:
        if self.fail_advance_once and advances:
            self.fail_advance_once = False
            raise InjectedFault("crash between audit and advance")
        return super().advance(advances, epoch)
