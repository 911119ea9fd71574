"""``CapturingPublisher``: the in-memory publisher (``FrozenBeat``, tests, dry runs).

It implements both ports of ``base.py`` at once (it is its own session), keeps every message
instead of sending it, and fails every publish with ``fail_with`` when that is set, so a test
can drive the round's broker-failure paths without a broker.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from celery_durable_beat.message import TickMessage
from celery_durable_beat.model import Reason


class CapturingPublisher:
    """Keeps messages in memory instead of sending them (``FrozenBeat``, tests, dry runs)."""

    def __init__(self) -> None:
        self.messages: list[TickMessage] = []
        self.fail_with: Reason | None = None

    @contextmanager
    def session(self) -> Iterator[CapturingPublisher]:
        yield self

    def unconfirmed(self) -> int:
        return 0

    def confirm(self) -> Reason | None:
        return None

    def publish(self, message: TickMessage) -> Reason | None:
        if self.fail_with is not None:
            return self.fail_with
        self.messages.append(message)
        return None
