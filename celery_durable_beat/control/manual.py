"""Manual runs (``DurableBeat.trigger``, SPEC §8): one tick published outside the plan.

- **The schedule does not move.** The run is one message with trigger ``manual``; the next tick
  stays where the plan put it.
- **An idempotency key runs once.** The task id is derived from the key (``ids.manual_task_id``),
  and a key whose run is already recorded publishes nothing: that run's task id comes back with
  ``created`` false.
- **A key reused with other kwargs is refused** (``InvalidArgument``, field ``kwargs``: API 422,
  CLI exit 2): replaying the first run would silently drop the new kwargs (SPEC §9). The run's
  ``enqueued`` record keeps a digest of its kwargs in ``detail`` (``BODY_KEY``), salted with the
  key, which history never shows: a digest of unsalted kwargs would let a reader of history guess
  a short secret. Kept in the store, the refusal holds across ``serve`` processes and restarts; a
  run recorded by an older version has no digest and is replayed, as before.
- **Recorded outside the fence**, by design (``AdminStore`` rule 10): a manual run is an
  operator's act, not the leader's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from celery_durable_beat.control.lookups import refuse_unplannable
from celery_durable_beat.control.views import TriggerResult
from celery_durable_beat.exceptions import InvalidArgument, PublishFailed
from celery_durable_beat.ids import manual_task_id
from celery_durable_beat.message import TickMessage, build_message
from celery_durable_beat.model import Outcome, Trigger
from celery_durable_beat.publish.base import Publisher
from celery_durable_beat.signals import recorded
from celery_durable_beat.store.base import AuditEvent, ControlStore, ScheduleRecord

BODY_KEY = "kwargs_digest"
"""The key of a manual run's kwargs digest in its ``enqueued`` record's ``detail``."""


def run_now(
    store: ControlStore,
    publisher: Publisher,
    record: ScheduleRecord,
    kwargs: Mapping[str, Any] | None,
    idempotency_key: str | None,
    sender: object = None,
) -> TriggerResult:
    """Publish one manual run of ``record`` (module docstring); PublishFailed when the broker
    refuses it (the failure is recorded, and the same key may try again). A run recorded
    ``enqueued`` sends ``signals.tick_enqueued`` as ``sender`` (SPEC §17)."""
    overrides = check_kwargs(kwargs)
    refuse_unplannable(record, "run")
    task_id = manual_task_id(record.name, idempotency_key, store.namespace)
    body = None if idempotency_key is None else body_digest(task_id, idempotency_key, overrides)
    found = store.find_enqueued(task_id)
    if found is not None:
        refuse_other_body(found.detail, body)
        return TriggerResult(task_id, created=False)
    message = build_message(
        record.name,
        record.definition,
        store.now_ms(),
        task_id,
        Trigger.MANUAL,
        overrides,
        namespace=store.namespace,
    )
    with publisher.session() as session:
        reason = session.publish(message) or session.confirm()  # delivered, not buffered
    detail = {} if body is None else {BODY_KEY: body}
    event = published_event(record, message, None if reason is None else reason.value, detail)
    store.record_manual(event)
    if reason is not None:
        raise PublishFailed(record.name, reason.value)
    recorded(sender, [event])
    return TriggerResult(task_id, created=True)


def published_event(
    record: ScheduleRecord,
    message: TickMessage,
    reason: str | None,
    detail: Mapping[str, Any] | None = None,
) -> AuditEvent:
    """The record of a tick published outside the round (a manual run, a backfill): its
    message's trigger, ``enqueued``, or ``failed`` with ``reason``."""
    return AuditEvent(
        schedule=record.name,
        tick_ms=message.tick_ms,
        task_id=message.task_id,
        trigger=message.trigger,
        outcome=Outcome.ENQUEUED if reason is None else Outcome.FAILED,
        reason=reason,
        lag_ms=0,
        version=record.version,
        detail=detail or {},
    )


def check_kwargs(kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """The run's kwargs overrides as a plain dict; InvalidArgument when not JSON values."""
    if kwargs is None:
        return {}
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise InvalidArgument('kwargs must be an object with string keys, e.g. {"day": "x"}')
    try:
        json.dumps(kwargs, allow_nan=False)
    except (TypeError, ValueError):
        raise InvalidArgument(
            "kwargs must hold only JSON values (strings, numbers, booleans, null, lists, objects)"
        ) from None
    return dict(kwargs)


def body_digest(task_id: str, idempotency_key: str, kwargs: Mapping[str, Any] | None) -> str:
    """The identity of a manual run's kwargs: the same kwargs in any key order give the same
    digest; salted with the idempotency key (module docstring)."""
    canonical = json.dumps(kwargs or {}, sort_keys=True, separators=(",", ":"), default=str)
    material = "\x00".join((task_id, idempotency_key, canonical))
    return hashlib.sha256(material.encode()).hexdigest()


def refuse_other_body(detail: Mapping[str, Any], body: str | None) -> None:
    """``InvalidArgument`` when the recorded run of this key was sent with other kwargs."""
    first = detail.get(BODY_KEY)
    if body is None or first is None or first == body:
        return
    raise InvalidArgument(
        "this idempotency key was used for a run with other kwargs; give a new key for new "
        "kwargs, or the same kwargs to replay that run",
        field="kwargs",
    )
