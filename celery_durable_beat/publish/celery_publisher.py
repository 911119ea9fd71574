"""The production publisher: the app's producer pool, and the session each transport gets.

Per round it takes one producer from the app's pool and picks the session its transport needs:

- py-amqp (RabbitMQ): ``send_task.CelerySession`` on a confirm-mode channel of the round's own
  (``amqp_confirms.AmqpConfirms``), so ``enqueued`` means the broker has the message;
- kombu's Redis transport: a kombu publish batch (one pipeline at ``confirm``), with
  ``redis_template.TemplatedRedisSession`` where templating is provably equivalent, else
  ``CelerySession`` on that batch;
- anything else: ``CelerySession``, each publish immediate;
- whatever the transport, when an integration wrapped ``celery.beat.Scheduler.apply_entry`` or
  ``apply_async`` (Sentry, Datadog: ``wrappers.beat_wrappers``, asked per round) and the
  publisher serves a beat's round (``scheduler``): ``through_beat.EntrySession`` on that
  transport's producer, batch or confirms, every tick through the wrapper (SPEC §17). With no
  wrapper the choice above is untouched.

This module is the only one that knows all the transport paths; each of them knows only the
ports (``base.py``) and the message (``celery_message.py``), and a new path is a new session
module plus one branch here.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from kombu.exceptions import BatchPublishError

from celery_durable_beat.publish.amqp_confirms import AmqpConfirms, speaks_confirms
from celery_durable_beat.publish.redis_template import TemplatedRedisSession, templating_refused
from celery_durable_beat.publish.send_task import CelerySession
from celery_durable_beat.publish.through_beat import EntrySession
from celery_durable_beat.publish.wrappers import beat_wrappers
from celery_durable_beat.redact import DEFAULT_KEYS

BATCH_LIMIT = 1_000_000
"""kombu's own auto-flush threshold, set out of reach: the dispatcher decides when to confirm."""


class CeleryPublisher:
    """The production publisher: the app's producer pool, one producer per round.

    ``redact_keys`` is ``durable_beat_redact`` (``backends.make_publisher`` passes the settings');
    the default is SPEC §2's, so a publisher built without settings still hides secrets.
    ``templates=False`` sends every tick through ``send_task`` even where the batching
    transport would let ``redis_template.TemplatedRedisSession`` repeat a captured message.
    ``scheduler`` is the beat ``Scheduler`` whose rounds this publisher serves: when a wrapper
    of stock beat's ``apply_entry`` is installed, ticks go through ``scheduler.apply_entry``
    (``through_beat.py``); None (manual runs, backfill, redelivery) never routes.
    """

    def __init__(
        self,
        app: Any,
        *,
        redact_keys: Sequence[str] = DEFAULT_KEYS,
        templates: bool = True,
        scheduler: Any = None,
    ) -> None:
        self.app = app
        self.redact_keys = tuple(redact_keys)
        self.templates = templates
        self.scheduler = scheduler

    @contextmanager
    def session(self) -> Iterator[CelerySession]:
        routed = callable(getattr(self.scheduler, "apply_entry", None)) and bool(beat_wrappers())
        with self.app.producer_or_acquire() as producer:
            if speaks_confirms(producer):
                confirms = AmqpConfirms(self.app, producer)
                try:
                    yield self._open(CelerySession, routed, producer, confirms=confirms)
                finally:
                    confirms.close()
                return
            if not hasattr(producer, "batch"):
                yield self._open(CelerySession, routed, producer)
                return
            batching = producer.batch(max_size=BATCH_LIMIT)
            kind = CelerySession if routed else self._batch_session(producer)
            session = self._open(kind, routed, producer, batching.__enter__())
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

    def _open(
        self,
        kind: type[CelerySession],
        routed: bool,
        producer: Any,
        batch: Any = None,
        confirms: AmqpConfirms | None = None,
    ) -> CelerySession:
        """A session of ``kind`` on the producer (and batch or confirms); an ``EntrySession``
        on them instead when ticks are ``routed`` through a wrapped ``apply_entry``."""
        if routed:
            return EntrySession(
                self.app,
                producer,
                batch,
                confirms=confirms,
                redact_keys=self.redact_keys,
                scheduler=self.scheduler,
            )
        return kind(self.app, producer, batch, confirms=confirms, redact_keys=self.redact_keys)

    def _batch_session(self, producer: Any) -> type[CelerySession]:
        """Templated publishing (``redis_template``) on kombu's Redis transport when provably
        equivalent, else send_task (every other transport: the demo's ``filesystem://`` too)."""
        if not self.templates or not _is_redis(producer):
            return CelerySession
        if templating_refused(self.app) is None:
            return TemplatedRedisSession
        return CelerySession


def _is_redis(producer: Any) -> bool:
    """Whether ``producer`` talks to Redis through kombu's Redis transport (Sentinel included)."""
    transport = getattr(getattr(producer, "connection", None), "transport", None)
    return getattr(transport, "driver_type", None) == "redis"
