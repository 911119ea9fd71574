"""The generic Celery path: every tick through ``app.send_task``, one producer per round.

Messages go through the app's own producer, so ``task_routes``, queues, priorities, ``options``
and serializers apply exactly as for any Celery task; the keyword arguments (the tick's id,
``periodic_*`` headers, redacted reprs) are ``celery_message.send_kwargs``. One producer (one
broker connection) serves a whole round. Failures are classified into stable reasons
(``CelerySession.reason_of``); the exception text is never stored, and a log line shows only
``logs.cause`` of it (type and first line, bounded, passwords hidden) — the class alone for a
serialization error, whose message may quote the refused value.

``celery_publisher.CeleryPublisher`` opens this session per round (on a kombu publish batch, with
AMQP confirms, or plain: ``CelerySession`` says what ``confirm`` proves on each);
``redis_template.TemplatedRedisSession`` extends it, and every tick it cannot template goes
through here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from celery.app.task import Task as CeleryTask
from celery.exceptions import QueueNotFound
from kombu.exceptions import BatchPublishError, ContentDisallowed, EncodeError, OperationalError

from celery_durable_beat.celery_message import ReprLimits, send_kwargs
from celery_durable_beat.logs import cause, log_extra
from celery_durable_beat.message import TickMessage
from celery_durable_beat.model import Action, Reason
from celery_durable_beat.publish.base import Confirms
from celery_durable_beat.publish.wrappers import celery_own
from celery_durable_beat.redact import DEFAULT_KEYS

log = logging.getLogger("celery_durable_beat.publish")

Send = Callable[[Any, dict[str, Any]], object]
"""How a tick's keyword arguments (``send_kwargs``) go out on a producer, in place of
``CelerySession``'s own call: ``through_beat.py`` sends them through a wrapped beat method."""


class CelerySession:
    """Publishes through one producer for the length of a round.

    The dispatcher records a tick as ``enqueued`` only after ``confirm`` succeeded, so what
    ``confirm`` checks is what ``enqueued`` means (docs/concepts.md, per transport):
    on Redis (kombu >= 5.7) publishes are buffered in a pipeline and ``confirm`` delivers them;
    on RabbitMQ (py-amqp) they go out on a confirm-mode channel and ``confirm`` waits for the
    broker's acks (``amqp_confirms.AmqpConfirms``); elsewhere each publish is immediate and
    ``confirm`` has nothing to add.
    """

    def __init__(
        self,
        app: Any,
        producer: Any,
        batch: Any = None,
        confirms: Confirms | None = None,
        redact_keys: Sequence[str] = DEFAULT_KEYS,
    ) -> None:
        self.app = app
        self.producer = producer
        self.batch = batch
        self.confirms = confirms
        self.redact_keys = tuple(redact_keys)
        self.limits = ReprLimits.of(app)
        self.failed = False
        self._buffered = 0
        self._connection_errors: tuple[type[BaseException], ...] = (
            OperationalError,
            BatchPublishError,
            ConnectionError,
            OSError,
            TimeoutError,
            *getattr(producer.connection, "connection_errors", ()),
        )

    def unconfirmed(self) -> int:
        return self._buffered

    def confirm(self) -> Reason | None:
        if not self._buffered:
            return None
        self._buffered = 0
        if self.confirms is not None:
            reason = self.confirms.settle()
            self.failed = self.failed or reason is not None
            return reason
        if self.batch is None:
            return None
        try:
            self.batch.flush()
        except self._connection_errors as exc:
            log.debug(
                "batch delivery raised %s",
                cause(exc),
                extra=log_extra(Action.CONFIRM_FAILED, reason=Reason.BROKER_UNAVAILABLE.value),
            )
            self.failed = True
            return Reason.BROKER_UNAVAILABLE
        return None

    def publish(self, message: TickMessage) -> Reason | None:
        return self.publish_with(message, None)

    def publish_with(self, message: TickMessage, send: Send | None) -> Reason | None:
        """``publish``, with ``send`` making the call on the producer when given (rules 2-3 the
        same: this session's producer, its buffering or confirms, the failure's reason)."""
        try:
            self._send(message, send)
        except Exception as exc:
            return self._failed_with(message, exc)
        return None

    def _failed_with(
        self, message: TickMessage, exc: Exception, reason: Reason | None = None
    ) -> Reason:
        return _failed(message, reason or self.reason_of(exc), exc)

    def _send(self, message: TickMessage, send: Send | None = None) -> None:
        """``app.send_task`` with the tick's options, through this round's producer; or the
        task's own ``apply_async`` when its class overrides it (``own_apply_async``)."""
        options = send_kwargs(message, self.redact_keys, self.limits)
        producer = self.producer if self.confirms is None else self.confirms.producer_for_publish()
        task = None if send is not None else own_apply_async(self.app, message.task)
        if send is not None:
            send(producer, options)
        elif task is not None:
            args, kwargs = options.pop("args"), options.pop("kwargs")
            task.apply_async(args, kwargs, producer=producer, **options)
        else:
            self.app.send_task(message.task, producer=producer, **options)
        if self.confirms is not None:
            self.confirms.published()
        if self.batch is not None or self.confirms is not None:
            self._buffered += 1

    def reason_of(self, exc: Exception) -> Reason:
        """The stable reason a publish raised ``exc`` for (its text is never kept)."""
        if isinstance(exc, (EncodeError, ContentDisallowed, TypeError, ValueError)):
            return Reason.SERIALIZATION_ERROR
        if isinstance(exc, QueueNotFound):
            return Reason.ROUTING_ERROR
        if isinstance(exc, self._connection_errors):
            return Reason.BROKER_UNAVAILABLE
        return Reason.PUBLISH_ERROR


def own_apply_async(app: Any, task_name: str) -> Any:
    """The task registered as ``task_name`` in beat's app if its class overrides Celery's
    ``Task.apply_async`` (celery-once's ``QueueOnce``, singleton and tenant-header bases), or
    if ``Task.apply_async`` itself was replaced by a wrapper (Sentry's, Datadog's): stock beat
    calls ``task.apply_async``, so such a tick goes through it too, with the tick's id and
    options, and the override or wrapper runs (SPEC §4, §17). None for every other task: the
    fast paths."""
    task = app.tasks.get(task_name)
    if task is None:
        return None
    if getattr(type(task), "apply_async", None) is CeleryTask.apply_async and celery_own(
        CeleryTask, "apply_async"
    ):
        return None
    return task


def _failed(message: TickMessage, reason: Reason, exc: BaseException) -> Reason:
    """Log what the publish raised: a known cause at DEBUG (the round's ``publish_failed``
    warning names its reason), an unclassified one at WARNING, since only its message says why."""
    level = logging.WARNING if reason is Reason.PUBLISH_ERROR else logging.DEBUG
    log.log(
        level,
        "publish %s raised %s",
        message.task_id,
        # A serializer's message may quote the value it refused (a tick's arguments): class only.
        type(exc).__name__ if reason is Reason.SERIALIZATION_ERROR else cause(exc),
        extra=log_extra(
            Action.PUBLISH_RAISED,
            schedule=message.schedule,
            task_id=message.task_id,
            reason=reason.value,
        ),
    )
    return reason
