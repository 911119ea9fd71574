"""The production publisher: the app's producer pool, and the session each transport gets.

Per round it takes one producer from the app's pool and picks the session its transport needs:

- py-amqp (RabbitMQ): ``send_task.CelerySession`` on a confirm-mode channel of the round's own
  (``amqp_confirms.AmqpConfirms``), so ``enqueued`` means the broker has the message;
- kombu's Redis transport: a kombu publish batch (one pipeline at ``confirm``), with
  ``redis_template.TemplatedRedisSession`` where templating is provably equivalent, else
  ``CelerySession`` on that batch;
- anything else: ``CelerySession``, each publish immediate.

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
from celery_durable_beat.redact import DEFAULT_KEYS

BATCH_LIMIT = 1_000_000
"""kombu's own auto-flush threshold, set out of reach: the dispatcher decides when to confirm."""


class CeleryPublisher:
    """The production publisher: the app's producer pool, one producer per round.

    ``redact_keys`` is ``durable_beat_redact`` (``backends.make_publisher`` passes the settings');
    the default is SPEC §2's, so a publisher built without settings still hides secrets.
    ``templates=False`` sends every tick through ``send_task`` even where the batching
    transport would let ``redis_template.TemplatedRedisSession`` repeat a captured message.
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
