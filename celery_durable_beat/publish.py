"""The Celery side of publishing: ``send_task`` with the tick's id and ``periodic_*`` headers.

Every tick message carries Celery's ``argsrepr`` / ``kwargsrepr`` computed here from the args
and kwargs with ``durable_beat_redact`` applied (``redact.redact``), rendered by Celery's own
``saferepr`` with the app's size limits: Flower, task events and worker logs show those, while
the body keeps the real values for the task.

Messages go through the app's own producer, so ``task_routes``, queues, priorities, ``options``
and serializers apply exactly as for any Celery task. One producer (one broker connection) serves
a whole round. Failures are classified into stable reasons; the exception text is never logged
or stored, since it can carry payloads or credentials.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from celery.exceptions import QueueNotFound
from celery.utils.saferepr import saferepr
from kombu.exceptions import BatchPublishError, ContentDisallowed, EncodeError, OperationalError

from celery_durable_beat.confirms import AmqpConfirms, speaks_confirms
from celery_durable_beat.message import TickMessage
from celery_durable_beat.model import Action, Reason
from celery_durable_beat.redact import DEFAULT_KEYS, redact

log = logging.getLogger("celery_durable_beat.publish")

HEADER_SCHEDULE = "periodic_schedule"
HEADER_TICK_MS = "periodic_tick_ms"
HEADER_TRIGGER = "periodic_trigger"

BATCH_LIMIT = 1_000_000
"""kombu's own auto-flush threshold, set out of reach: the dispatcher decides when to confirm."""

RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}
"""Short: a round must not hang on a dead broker; the next round retries anyway."""


def tick_headers(message: TickMessage) -> dict[str, Any]:
    return {
        HEADER_SCHEDULE: message.schedule,
        HEADER_TICK_MS: message.tick_ms,
        HEADER_TRIGGER: message.trigger.value,
    }


@dataclass(frozen=True)
class ReprLimits:
    """How long Celery lets ``argsrepr`` / ``kwargsrepr`` grow, and how deep it looks."""

    args: int = 1024
    kwargs: int = 1024
    levels: int = 3

    @classmethod
    def of(cls, app: Any) -> ReprLimits:
        """The app's own limits, as ``app.amqp`` applies them to a task it sends itself."""
        amqp = app.amqp
        return cls(
            args=amqp.argsrepr_maxsize,
            kwargs=amqp.kwargsrepr_maxsize,
            levels=app.conf.get("task_repr_maxlevels", CELERY_LIMITS.levels),  # newer Celery
        )


CELERY_LIMITS = ReprLimits()
"""Celery's defaults, for callers without an app at hand."""


def shown_reprs(
    args: Sequence[Any],
    kwargs: Any,
    redact_keys: Sequence[str],
    limits: ReprLimits = CELERY_LIMITS,
) -> tuple[str, str]:
    """``(argsrepr, kwargsrepr)`` as Celery would write them, but of the redacted values: a
    mapping key containing any of ``redact_keys`` (case-insensitive, at any depth, in args too)
    shows ``***``. ``args`` and ``kwargs`` themselves are not changed."""
    return (
        saferepr(redact(list(args), redact_keys), limits.args, maxlevels=limits.levels),
        saferepr(redact(kwargs, redact_keys), limits.kwargs, maxlevels=limits.levels),
    )


def send_kwargs(
    message: TickMessage,
    redact_keys: Sequence[str] = DEFAULT_KEYS,
    limits: ReprLimits = CELERY_LIMITS,
) -> dict[str, Any]:
    """Keyword arguments for ``app.send_task``: the entry's options, then our id, headers and
    the redacted reprs (an ``argsrepr`` / ``kwargsrepr`` the entry sets itself is kept: its
    author chose what to show)."""
    options = dict(message.options)
    headers = {**dict(options.pop("headers", None) or {}), **tick_headers(message)}
    options.pop("task_id", None)
    argsrepr, kwargsrepr = shown_reprs(message.args, message.kwargs, redact_keys, limits)
    return {
        "argsrepr": argsrepr,
        "kwargsrepr": kwargsrepr,
        **options,
        "args": list(message.args),
        "kwargs": dict(message.kwargs),
        "task_id": message.task_id,
        "headers": headers,
        "retry": True,
        "retry_policy": RETRY_POLICY,
    }


class CelerySession:
    """Publishes through one producer for the length of a round.

    The dispatcher records a tick as ``enqueued`` only after ``confirm`` succeeded, so what
    ``confirm`` checks is what ``enqueued`` means (docs/concepts.md, per transport):
    on Redis (kombu >= 5.7) publishes are buffered in a pipeline and ``confirm`` delivers them;
    on RabbitMQ (py-amqp) they go out on a confirm-mode channel and ``confirm`` waits for the
    broker's acks (``confirms.AmqpConfirms``); elsewhere each publish is immediate and
    ``confirm`` has nothing to add.
    """

    def __init__(
        self,
        app: Any,
        producer: Any,
        batch: Any = None,
        confirms: AmqpConfirms | None = None,
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
                type(exc).__name__,
                extra={
                    "action": Action.CONFIRM_FAILED.value,
                    "reason": Reason.BROKER_UNAVAILABLE.value,
                },
            )
            self.failed = True
            return Reason.BROKER_UNAVAILABLE
        return None

    def publish(self, message: TickMessage) -> Reason | None:
        try:
            self._send(message)
        except Exception as exc:
            return self._failed_with(message, exc)
        return None

    def _failed_with(self, message: TickMessage, exc: Exception) -> Reason:
        return _failed(message, self.reason_of(exc), exc)

    def _send(self, message: TickMessage) -> None:
        """``app.send_task`` with the tick's options, through this round's producer."""
        options = send_kwargs(message, self.redact_keys, self.limits)
        if self.confirms is None:
            self.app.send_task(message.task, producer=self.producer, **options)
        else:
            producer = self.confirms.producer_for_publish()
            self.app.send_task(message.task, producer=producer, **options)
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


def _failed(message: TickMessage, reason: Reason, exc: BaseException) -> Reason:
    log.debug(
        "publish %s raised %s",
        message.task_id,
        type(exc).__name__,
        extra={
            "action": Action.PUBLISH_RAISED.value,
            "schedule": message.schedule,
            "task_id": message.task_id,
            "reason": reason.value,
        },
    )
    return reason


class CeleryPublisher:
    """The production publisher: the app's producer pool, one producer per round.

    ``redact_keys`` is ``durable_beat_redact`` (``wiring.make_publisher`` passes the settings');
    the default is SPEC §2's, so a publisher built without settings still hides secrets.
    ``templates=False`` sends every tick through ``send_task`` even where the batching
    transport would let ``publish_redis.TemplatedRedisSession`` repeat a captured message.
    """

    def __init__(
        self, app: Any, *, redact_keys: Sequence[str] = DEFAULT_KEYS, templates: bool = True
    ) -> None:
        self.app = app
        self.redact_keys = tuple(redact_keys)
        self.templates = templates

    @contextmanager
    def session(self) -> Iterator[CelerySession]:
        with self.app.producer_or_acquire() as producer:
            if speaks_confirms(producer):
                confirms = AmqpConfirms(self.app, producer)
                try:
                    yield CelerySession(
                        self.app, producer, confirms=confirms, redact_keys=self.redact_keys
                    )
                finally:
                    confirms.close()
                return
            if not hasattr(producer, "batch"):
                yield CelerySession(self.app, producer, redact_keys=self.redact_keys)
                return
            batching = producer.batch(max_size=BATCH_LIMIT)
            session = self._batch_session(producer)(
                self.app, producer, batching.__enter__(), redact_keys=self.redact_keys
            )
            try:
                yield session
            except BaseException:
                batching.__exit__(*sys.exc_info())  # discards what was not confirmed
                raise
            try:
                batching.__exit__(None, None, None)
            except BatchPublishError:
                if not session.failed:  # after a failed confirm the batch refuses reuse
                    raise

    def _batch_session(self, producer: Any) -> type[CelerySession]:
        """Templated publishing (``publish_redis``) on kombu's Redis transport when provably
        equivalent, else send_task (every other transport: the demo's ``filesystem://`` too)."""
        if not self.templates or not _is_redis(producer):
            return CelerySession
        from celery_durable_beat.publish_redis import TemplatedRedisSession, templating_refused

        if templating_refused(self.app) is None:
            return TemplatedRedisSession
        return CelerySession


def _is_redis(producer: Any) -> bool:
    """Whether ``producer`` talks to Redis through kombu's Redis transport (Sentinel included)."""
    transport = getattr(getattr(producer, "connection", None), "transport", None)
    return getattr(transport, "driver_type", None) == "redis"


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
