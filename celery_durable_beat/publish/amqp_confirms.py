"""Publisher confirms on RabbitMQ (kombu's ``pyamqp`` transport): ``enqueued`` means the broker
has the message, not that its frame left the socket.

An AMQP ``basic.publish`` returns before the broker has processed the message: a broker that
crashes, refuses the message (a full queue with ``overflow: reject-publish``, a message over
``max_message_size``) or closes the channel afterwards loses it, and nothing on the publishing
side raises. Recording such a tick ``enqueued`` and advancing would lose it for good.

So a round publishes on an AMQP channel of its own in confirm mode (RabbitMQ's extension): the
broker numbers the channel's publishes and answers each with ``basic.ack`` (routed to its queues,
and written to disk for a persistent message on a durable queue) or ``basic.nack`` (refused). The
publishes are not waited for one by one, which would cost a round trip each: :meth:`settle`
drains the connection until every outstanding number is answered, once per confirm, so a batch
costs about one round trip. Anything but an ack for every publish of the batch — a nack, a
``basic.return`` of a mandatory publish, a closed channel, a connection error, no answer within
``CONFIRM_TIMEOUT`` — makes the whole batch uncertain: the dispatcher records it ``failed`` and
the next round publishes the same task ids again (the worker guard absorbs the copies).

A connection configured with kombu's own ``confirm_publish`` transport option already waits for
each publish's confirm inside ``basic_publish`` (a nack raises there): then nothing is tracked
here. The pooled producer's channel is never put in confirm mode: the round's channel is closed
when the round ends.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from celery_durable_beat.logs import cause, log_extra
from celery_durable_beat.model import Action, Reason

log = logging.getLogger("celery_durable_beat.publish")

CONFIRM_TIMEOUT = 5.0
"""Seconds a confirm waits for the broker's answers; then the batch is uncertain (``failed``)."""


def speaks_confirms(producer: Any) -> bool:
    """Whether ``producer`` publishes over py-amqp, whose publishes need confirms to be certain."""
    transport = getattr(producer.connection, "transport", None)
    return getattr(transport, "driver_name", None) == "py-amqp"


class AmqpConfirms:
    """One round's confirm-mode channel and the publishes on it the broker has not answered."""

    def __init__(self, app: Any, pooled: Any, timeout: float = CONFIRM_TIMEOUT) -> None:
        self.app = app
        self.pooled = pooled
        self.timeout = timeout
        self.channel: Any = None
        self.producer: Any = None
        self._synchronous = False
        self._published = 0
        self._outstanding: set[int] = set()
        self._nacked = 0
        self._returned = 0

    def producer_for_publish(self) -> Any:
        """The producer on the confirm channel, opened on first use (so a dead broker shows up
        as a failed publish, classified like any other, not as a failed round)."""
        if self.producer is None:
            channel = self.pooled.connection.channel()
            self._synchronous = bool(getattr(channel.connection, "confirm_publish", False))
            if not self._synchronous:
                channel.confirm_select()
                channel.events["basic_ack"].add(self._on_ack)
                channel.events["basic_nack"].add(self._on_nack)
            self.channel = channel
            self.producer = self.app.amqp.Producer(
                channel,
                exchange=self.pooled.exchange,
                serializer=self.pooled.serializer,
                compression=self.pooled.compression,
                auto_declare=False,
                on_return=self._on_return,
            )
        return self.producer

    def published(self) -> None:
        """One publish went out on the channel: the broker will answer it with the next number."""
        if not self._synchronous:
            self._published += 1
            self._outstanding.add(self._published)

    def settle(self) -> Reason | None:
        """Wait until the broker answered every publish so far; a reason if any is uncertain."""
        try:
            self._drain()
        except self._errors() as exc:
            return self._uncertain(f"the broker's confirms did not come ({cause(exc)})")
        if self._outstanding:
            return self._uncertain(f"{len(self._outstanding)} publish(es) not confirmed in time")
        if self._nacked or self._returned:
            return self._uncertain(
                f"the broker refused {self._nacked} and returned {self._returned} publish(es)",
                Reason.ROUTING_ERROR if self._returned and not self._nacked else None,
            )
        return None

    def close(self) -> None:
        """Close the round's channel; a broken connection has closed it already."""
        channel, self.channel, self.producer = self.channel, None, None
        if channel is None:
            return
        try:
            channel.close()
        except self._errors():
            log.debug(
                "the confirm channel was already closed",
                extra=log_extra(Action.CONFIRM_FAILED),
            )

    def _drain(self) -> None:
        deadline = time.monotonic() + self.timeout
        while self._outstanding and self._channel_usable():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self.channel.connection.drain_events(timeout=remaining)

    def _channel_usable(self) -> bool:
        """False once the channel closed or kombu's retry moved the producer to a new channel
        (one not in confirm mode): the answers still missing will never come."""
        return bool(self.channel.is_open) and self.producer.channel is self.channel

    def _errors(self) -> tuple[type[BaseException], ...]:
        """What a broken connection or channel raises (socket timeouts are OSErrors)."""
        connection = self.pooled.connection
        return (
            OSError,
            *getattr(connection, "connection_errors", ()),
            *getattr(connection, "channel_errors", ()),
        )

    def _uncertain(self, what: str, reason: Reason | None = None) -> Reason:
        reason = reason or Reason.BROKER_UNAVAILABLE
        log.warning(
            "publisher confirm failed: %s; the batch is recorded failed and sent again",
            what,
            extra=log_extra(Action.CONFIRM_FAILED, reason=reason.value),
        )
        self._outstanding.clear()
        self._nacked = self._returned = 0
        return reason

    def _on_ack(self, delivery_tag: int, multiple: bool) -> None:
        self._answered(delivery_tag, multiple)

    def _on_nack(self, delivery_tag: int, multiple: bool) -> None:
        self._nacked += self._answered(delivery_tag, multiple)

    def _answered(self, delivery_tag: int, multiple: bool) -> int:
        done = {t for t in self._outstanding if t <= delivery_tag} if multiple else {delivery_tag}
        done &= self._outstanding
        self._outstanding -= done
        return len(done)

    def _on_return(self, exc: BaseException, exchange: str, routing_key: str, msg: Any) -> None:
        """A mandatory publish no queue took: the broker acks it next, but does not have it."""
        self._returned += 1
