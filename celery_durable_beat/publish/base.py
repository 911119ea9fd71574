"""The publishing ports: what the round (``dispatch.py``) asks of a broker, and nothing more.

A ``Publisher`` opens one ``PublishSession`` per round; every transport path is one module of
this package implementing the session (``send_task.py``, ``redis_template.py``), chosen per
round by ``celery_publisher.CeleryPublisher``; ``capturing.py`` is the in-memory double. A new
way to publish (``apply_async`` for tasks that override it, pipelined Redis publishing) is one
more session module here, and the round does not change.

The contract, as rules a test can check (the round's tests and
``tests/integration/test_publish*.py`` check them against the real brokers):

1. ``Publisher.session()`` is entered once per round and holds one broker connection (one
   producer) for the whole round; leaving it releases the connection and discards whatever
   was published but not confirmed, which therefore never counts as ``enqueued``.
2. ``PublishSession.publish(message)`` sends or buffers one tick under ``message.task_id``
   with the ``periodic_*`` headers (``message.tick_headers``); publishing the same tick again
   sends the same id, which the worker guard absorbs.
3. ``publish`` returns None when the transport accepted the message, else the stable
   ``Reason`` it failed for (``broker_unavailable``, ``serialization_error``, ``routing_error``,
   ``publish_error``). It does not raise for a broker or message fault; the round stores the
   reason, never the exception's text (it can carry payloads or credentials).
4. ``unconfirmed()`` counts the publishes accepted since the last ``confirm`` that the
   transport has not proven delivered yet (0 for a transport whose publish is the delivery).
5. ``confirm()`` delivers, or waits for the broker's acknowledgement of, those publishes. None
   means the broker has each of them; a reason means every one of them is uncertain: the round
   records them ``failed`` and publishes the same ids again next round. Afterwards
   ``unconfirmed()`` is 0. The round confirms before it records any tick ``enqueued``, and
   whenever ``unconfirmed()`` reaches ``dispatch.CONFIRM_EVERY``.
6. A session serves one round on one thread; it is never shared between rounds.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol

from celery_durable_beat.message import TickMessage
from celery_durable_beat.model import Reason


class PublishSession(Protocol):
    """The publishes of one round (rules 2 to 6). A transport may buffer them until ``confirm``."""

    def publish(self, message: TickMessage) -> Reason | None:
        """Send (or buffer) one tick; None if accepted, else the stable reason it failed."""

    def unconfirmed(self) -> int:
        """How many accepted publishes are still buffered or unacknowledged."""

    def confirm(self) -> Reason | None:
        """Deliver what is buffered; a reason means every buffered publish is uncertain."""


class Publisher(Protocol):
    """What the round publishes through (rule 1)."""

    def session(self) -> AbstractContextManager[PublishSession]:
        """One broker connection (and producer) reused for a whole round."""


class Confirms(Protocol):
    """A broker's acknowledgement of a round's publishes, for a session that sends through
    ``send_task`` (``amqp_confirms.AmqpConfirms`` on RabbitMQ): the session publishes on
    ``producer_for_publish()``, reports each publish, and ``settle`` is its ``confirm``."""

    def producer_for_publish(self) -> Any:
        """The producer to publish this tick on (opened on first use)."""

    def published(self) -> None:
        """One publish went out on that producer."""

    def settle(self) -> Reason | None:
        """Wait for the broker's answers to every publish so far; a reason if any is uncertain."""
