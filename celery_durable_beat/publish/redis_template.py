"""Templated publishing on kombu's Redis transport: ``send_task`` once per kind of message.

A burst of ticks is mostly the same message over and over: one schedule (or many sharing a task
and options) differs from tick to tick only in its id, ``periodic_*`` headers, rendered
arguments, reprs and expiry. ``app.send_task`` recomputes everything else per message (routing,
option merging, ``maybe_declare``, kombu's retry wrapper), which is most of a burst's cost.

``TemplatedRedisSession`` sends the first tick of each *template key* (task name, the options
other than ``expires``, the kind of ``expires``) through ``app.send_task`` exactly as
``CelerySession`` does, and captures the kombu message dict and the exchange / routing key that
kombu hands to the producer's publish batch. Later ticks with the same key copy that dict, patch
the per-tick fields, and hand it to the same batch, so kombu's Redis channel still does the rest
(body base64, ``delivery_tag``, ``delivery_info``, exchange lookup, ``_q_for_pri`` priority
queue, the queue's ``x-expires``) and the whole round still goes out in one pipeline at
``confirm()``. The per-tick fields, set as ``send_task`` sets them:

- body: ``(args, kwargs, embed)`` serialised with the template's serializer (``embed`` is
  decoded from the template, so ``link`` / ``chain`` options are kept as sent);
- headers ``id``, ``root_id`` (= the id: a beat has no parent task), ``argsrepr``,
  ``kwargsrepr``, ``expires`` and every header of ``message.tick_headers`` (``periodic_schedule``
  and ``periodic_task_name`` name the tick's own schedule, which need not be the template's:
  schedules sharing a task and options share a template); properties ``correlation_id``,
  ``reply_to`` (``app.thread_oid``), ``argsrepr`` / ``kwargsrepr`` (Celery copies them there
  too) and ``expiration``.

When it is used (``templating_refused`` returns None, decided once per session, then per
template): Celery's protocol 2 through the stock ``Celery.send_task`` and ``AMQP``, neither
``send_task`` nor kombu's ``Producer.publish`` replaced by a wrapper (``wrappers.celery_own``:
a templated tick calls neither, so a wrapper would miss it); not
``task_always_eager``; no ``task_send_sent_event``; no compression; ``task_routes`` made only
of mappings (a router function may look at the arguments, which differ per tick); and **no
receiver connected** to ``before_task_publish``, ``after_task_publish`` or ``task_sent``.
Skipping those signals changes nothing only because nobody listens: connecting a receiver
switches the fast path off, and every tick then goes through ``send_task`` and sends them.
The channel must be kombu's Redis channel with an active publish batch (checked on the captured
call). Before a template is used, it renders the very tick that ``send_task`` just sent and must
reproduce the captured message field by field (except the clock-dependent ``expires`` /
``expiration``); any difference (an ``eta``, a parent task, a custom header that changes per
tick) refuses that key and its ticks keep going through ``send_task``.

Routing is resolved by kombu per message as for ``send_task``; queues and exchanges were
declared on this connection by the template's own ``send_task`` (``maybe_declare`` caches them,
so later ``send_task`` calls would not declare them again either). A connection error while
templating falls back to ``send_task`` for that tick, so kombu's retry policy still applies.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from celery import Celery, signals
from celery.app.amqp import AMQP
from celery.app.routes import MapRoute
from celery.utils.time import add_seconds_to_datetime, maybe_make_aware, subtract_datetimes
from kombu.messaging import Producer
from kombu.serialization import dumps, loads, registry

from celery_durable_beat.celery_message import shown_reprs
from celery_durable_beat.logs import cause, log_extra
from celery_durable_beat.message import TickMessage, tick_headers
from celery_durable_beat.model import Action, Reason
from celery_durable_beat.publish.redis_wire import (
    Command,
    WireRefused,
    WireTemplate,
    WireWriter,
    new_delivery_tag,
    tick_values,
)
from celery_durable_beat.publish.send_task import CelerySession, own_apply_async
from celery_durable_beat.publish.wrappers import celery_own

log = logging.getLogger("celery_durable_beat.publish")

PUBLISH_SIGNALS = (signals.before_task_publish, signals.after_task_publish, signals.task_sent)
"""Sent by ``send_task`` per message; a connected receiver turns templating off."""

REPR_CACHE_SIZE = 10_000
"""Distinct ``(args, kwargs)`` whose reprs a session remembers."""

UNTEMPLATED_OPTIONS = frozenset({"countdown", "eta", "compression", "task_id"})
"""Options whose effect is per publish (an ETA from the clock) or not reproduced here."""


def templating_refused(app: Any) -> str | None:
    """Why ``app``'s ticks must all go through ``send_task``, or None if templates may be used.

    Checked once per session; nothing here touches the broker."""
    conf = app.conf
    reasons = (
        (type(app).send_task is not Celery.send_task, "send_task is overridden"),
        (not celery_own(Celery, "send_task"), "Celery.send_task is wrapped"),
        (not celery_own(Producer, "publish"), "kombu's Producer.publish is wrapped"),
        (type(app.amqp) is not AMQP, "a custom app.amqp class"),
        (conf.task_protocol != 2, "task_protocol is not 2"),
        (bool(conf.task_always_eager), "task_always_eager"),
        (bool(conf.task_send_sent_event), "task_send_sent_event"),
        (conf.task_compression is not None, "task_compression"),
        (any(s.receivers for s in PUBLISH_SIGNALS), "a publish signal has receivers"),
        (
            not all(isinstance(r, MapRoute) for r in app.amqp.router.routes),
            "task_routes has a router function",
        ),
    )
    return next((why for refused, why in reasons if refused), None)


class MessageTemplate:
    """One captured kombu message and where it was published; renders any tick of its key."""

    def __init__(self, app: Any, wire: dict[str, Any], publish_kwargs: dict[str, Any]) -> None:
        self.app = app
        self.wire = wire
        self.publish_kwargs = publish_kwargs
        content_type = wire["content-type"]
        self.serializer = registry.type_to_name[content_type]
        body = loads(  # type: ignore[no-untyped-call]  # bytes this process just serialised
            wire["body"], wire["content-type"], wire["content-encoding"], accept={content_type}
        )
        self.embed = body[2]
        self.ignore_result = bool(wire["headers"].get("ignore_result"))
        self.wire_commands: WireTemplate | None = None
        """Its final Redis commands, when they proved repeatable (``redis_wire``)."""

    def render(self, message: TickMessage, reprs: tuple[str, str]) -> dict[str, Any] | None:
        """The kombu message of ``message`` as ``send_task`` would hand it to the batch now;
        None when its expiry lies in the past (``send_task`` logs a warning then: let it)."""
        headers = dict(self.wire["headers"])
        properties = dict(self.wire["properties"])
        expires, expiration = self.expiry(message.options.get("expires"))
        if expiration is not None:
            if expiration < 0:
                return None
            properties["expiration"] = str(int(expiration * 1000))
        argsrepr, kwargsrepr = reprs
        headers.update(
            id=message.task_id,
            root_id=message.task_id,
            argsrepr=argsrepr,
            kwargsrepr=kwargsrepr,
            expires=expires,
            **tick_headers(message),
        )
        properties.update(
            correlation_id=message.task_id,
            reply_to=self.app.thread_oid,
            argsrepr=argsrepr,
            kwargsrepr=kwargsrepr,
            delivery_info={},
        )
        body = (list(message.args) or (), dict(message.kwargs), self.embed)  # as as_task_v2
        content_type, content_encoding, data = dumps(  # type: ignore[no-untyped-call]
            body, serializer=self.serializer
        )
        return {
            "body": data,
            "content-encoding": content_encoding,
            "content-type": content_type,
            "headers": headers,
            "properties": properties,
        }

    def expiry(self, expires: Any) -> tuple[str | None, float | None]:
        """``(expires header, expiration seconds)`` as ``send_task`` / ``as_task_v2`` set them."""
        if expires is None:
            return None, None
        if isinstance(expires, datetime):
            return expires.isoformat(), subtract_datetimes(expires, self.app.now()).total_seconds()
        at = add_seconds_to_datetime(self.app.now(), expires)
        return maybe_make_aware(at, tz=self.app.timezone).isoformat(), float(expires)

    def reproduces(self, message: TickMessage, reprs: tuple[str, str]) -> bool:
        """Whether rendering the captured tick gives the captured message (the proof of use)."""
        rendered = self.render(message, reprs)
        if rendered is None:
            return False
        if message.options.get("expires") is not None:  # clock-dependent in both
            for part, key in (("headers", "expires"), ("properties", "expiration")):
                rendered[part][key] = self.wire[part].get(key)
        return rendered == self.wire


class TemplatedRedisSession(CelerySession):
    """``CelerySession`` whose repeated ticks skip ``send_task`` (see the module docstring).

    ``templated`` counts ticks published from a template, ``sent`` those through ``send_task``,
    ``wired`` the templated ones written as Redis commands directly (``redis_wire``).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.templates: dict[str, MessageTemplate | None] = {}
        self.templated = 0
        self.sent = 0
        self.wired = 0
        self._on_task_call: Callable[[Any, str], Any] | None = None
        self._shown: dict[str, tuple[str, str]] = {}
        self._writer = WireWriter()
        self._keys: dict[int, tuple[Any, str, str | None]] = {}
        self._overrides: dict[str, bool] = {}

    def publish(self, message: TickMessage) -> Reason | None:
        key = self._key_of(message)
        if key is None or self._overridden(message.task):
            return self._send_task(message)  # (an overridden ``apply_async`` must run)
        if key not in self.templates:
            return self._capture(message, key)
        template = self.templates[key]
        if template is None:
            return self._send_task(message)
        return self._publish_from(template, message)

    def _overridden(self, task: str) -> bool:
        """Whether the task's class overrides ``apply_async`` (``own_apply_async``), asked once
        a session per task name (``app.tasks`` is a lookup through the app's finalizer)."""
        known = self._overrides.get(task)
        if known is None:
            known = self._overrides[task] = own_apply_async(self.app, task) is not None
        return known

    def _key_of(self, message: TickMessage) -> str | None:
        """``template_key``, remembered by the options mapping itself: a tick without an expiry
        carries its definition's own, shared by every tick of it and of the definitions with
        the same stored text (the round's definition cache), so the key's JSON is made once.
        The entry holds the mapping, so its ``id`` cannot be reused while remembered."""
        options = message.options
        known = self._keys.get(id(options))
        if known is not None and known[0] is options and known[1] == message.task:
            return known[2]
        key = template_key(message)
        if len(self._keys) < REPR_CACHE_SIZE:
            self._keys[id(options)] = (options, message.task, key)
        return key

    def _publish_from(self, template: MessageTemplate, message: TickMessage) -> Reason | None:
        try:
            if template.wire_commands is not None:
                written = self._write(template, template.wire_commands, message)
                if not written:
                    return self._send_task(message)
            else:
                wire = template.render(message, self._reprs(message))
                if wire is None:
                    return self._send_task(message)
                self._before_publish(template, message)
                self.batch.state.publish(self.producer.channel, wire, **template.publish_kwargs)
        except self._connection_errors:
            return self._send_task(message)  # kombu's retry policy applies there
        except Exception as exc:
            return self._failed_with(message, exc)
        self._buffered += 1
        self.templated += 1
        return None

    def _before_publish(self, template: MessageTemplate, message: TickMessage) -> None:
        if not template.ignore_result and self._on_task_call is not None:
            self._on_task_call(self.producer, message.task_id)

    def _write(self, template: MessageTemplate, wire: WireTemplate, message: TickMessage) -> bool:
        """Buffer the tick's commands on the batch's pipeline; False when it expired already
        (``send_task`` then publishes it as it would, warning included)."""
        expires, expiration = template.expiry(message.options.get("expires"))
        if expiration is not None and expiration < 0:
            return False
        values = tick_values(message, self._reprs(message), expires, expiration)
        values[("body", "")] = wire.body(message.args, message.kwargs)
        values[("properties", "delivery_tag")] = new_delivery_tag()
        self._before_publish(template, message)
        self._writer.write(wire, wire.payload_of(values))
        self.wired += 1
        return True

    def confirm(self) -> Reason | None:
        """kombu's batch delivers its pipeline, ours included; if only ticks of ours were
        buffered since its last flush, kombu has nothing to flush and the pipeline is ours to
        execute, with the same meaning (a failure is an uncertain delivery)."""
        self._writer.flush_pushes()
        reason = super().confirm()
        if reason is not None or not self._writer.unsent():
            return reason
        try:
            self._writer.execute()
        except self._connection_errors as exc:
            self.failed = True
            log.debug(
                "batch delivery raised %s",
                cause(exc),
                extra=log_extra(Action.CONFIRM_FAILED, reason=Reason.BROKER_UNAVAILABLE.value),
            )
            return Reason.BROKER_UNAVAILABLE
        return None

    def _send_task(self, message: TickMessage) -> Reason | None:
        self._writer.flush_pushes()  # what was published before goes out before it
        self.sent += 1
        return super().publish(message)

    def _reprs(self, message: TickMessage) -> tuple[str, str]:
        """``shown_reprs``, remembered for the session by the ``repr`` of the values: they are
        JSON values (definitions are stored as JSON), for which ``repr`` is a faithful key, and
        ``saferepr`` was the largest cost of a templated tick. Rendered placeholders make the
        values differ, so those ticks simply miss."""
        key = repr((message.args, message.kwargs))
        shown = self._shown.get(key)
        if shown is None:
            shown = shown_reprs(message.args, message.kwargs, self.redact_keys, self.limits)
            if len(self._shown) < REPR_CACHE_SIZE:
                self._shown[key] = shown
        argsrepr, kwargsrepr = shown
        return (
            message.options.get("argsrepr", argsrepr),
            message.options.get("kwargsrepr", kwargsrepr),
        )

    def _capture(self, message: TickMessage, key: str) -> Reason | None:
        """Send through ``send_task`` and keep what it handed to the batch as the key's template."""
        state = self.batch.state
        publish = state.publish
        seen: list[tuple[Any, dict[str, Any], dict[str, Any]]] = []

        def capturing(channel: Any, wire: dict[str, Any], **kwargs: Any) -> Any:
            seen.append((channel, copy.deepcopy(wire), dict(kwargs)))
            return publish(channel, wire, **kwargs)

        state.publish = capturing
        self._writer.flush_pushes()
        before = len(getattr(state.session, "pipeline", None) or ())
        try:
            reason = self._send_task(message)
        finally:
            del state.publish  # the class's method again
        if reason is not None:
            return reason  # no template yet: the next tick of the key tries again
        try:
            self.templates[key] = self._template_of(message, seen)
            self._learn_wire(self.templates[key], message, before)
        except Exception as exc:  # the tick is out already: templating must never fail the round
            _refuse(message, f"the captured message could not be checked ({cause(exc)})")
            self.templates[key] = None
        return None

    def _template_of(
        self, message: TickMessage, seen: list[tuple[Any, dict[str, Any], dict[str, Any]]]
    ) -> MessageTemplate | None:
        from kombu.transport import redis as kombu_redis

        if len(seen) != 1:
            _refuse(message, "send_task did not publish exactly once")
            return None
        channel, wire, publish_kwargs = seen[0]
        state = self.batch.state
        if not (
            isinstance(channel, kombu_redis.Channel)
            and isinstance(state.session, kombu_redis.PublishBatch)
        ):
            _refuse(message, "not kombu's Redis channel with a publish batch")
            return None
        try:
            template = MessageTemplate(self.app, wire, publish_kwargs)
        except Exception as exc:
            _refuse(message, f"the captured message could not be read back ({cause(exc)})")
            return None
        if not template.reproduces(message, self._reprs(message)):
            _refuse(message, "rendering the captured tick differs from send_task's")
            return None
        if not template.ignore_result:
            self._on_task_call = _on_task_call_of(self.app)
        return template

    def _learn_wire(
        self,
        template: MessageTemplate | None,
        message: TickMessage,
        before: int,
    ) -> None:
        """Give ``template`` the commands its ``send_task`` buffered, if they prove repeatable:
        rendering the captured tick must give the captured envelope byte for byte."""
        if template is None:
            return
        pipeline = getattr(self.batch.state.session, "pipeline", None)
        stack = getattr(pipeline, "command_stack", None)
        if stack is None or len(stack) <= before:
            return  # flushed meanwhile, or not a redis-py pipeline: kombu's path stays
        commands: list[Command] = [args for args, _ in stack[before:]]
        try:
            wire = WireTemplate(commands, template.serializer, template.embed)
        except (WireRefused, ValueError, KeyError, TypeError) as exc:
            _refuse_wire(message, str(exc))
            return
        envelope = json.loads(wire.payload)
        expires = envelope["headers"].get("expires")
        expiration = envelope["properties"].get("expiration")
        values = tick_values(message, self._reprs(message), expires, None)
        if expiration is not None:
            values[("properties", "expiration")] = expiration
        values[("body", "")] = wire.body(message.args, message.kwargs)
        values[("properties", "delivery_tag")] = envelope["properties"]["delivery_tag"]
        if wire.payload_of(values) != wire.payload:
            _refuse_wire(message, "rendering the captured tick differs from kombu's envelope")
            return
        if self._writer.adopt(pipeline):  # a batch keeps one pipeline: never another's
            template.wire_commands = wire


def template_key(message: TickMessage) -> str | None:
    """The options that make two ticks' messages the same apart from their per-tick fields;
    None when the tick's options cannot be templated (or written as canonical JSON)."""
    options = message.options
    if UNTEMPLATED_OPTIONS.intersection(options):
        return None
    expires = options.get("expires")
    kind = type(expires).__name__ if isinstance(expires, datetime) else expires
    rest = {k: v for k, v in options.items() if k != "expires"}
    try:
        return json.dumps([message.task, kind, rest], sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):
        return None


def _on_task_call_of(app: Any) -> Callable[[Any, str], Any] | None:
    """The result backend's ``on_task_call`` (``send_task`` calls it per message unless the
    result is ignored: the Redis backend subscribes to the result); None if it is a no-op."""
    from celery.backends.base import Backend

    backend = app.backend
    if type(backend).on_task_call is Backend.on_task_call:
        return None
    return backend.on_task_call  # type: ignore[no-any-return]


def _refuse_wire(message: TickMessage, why: str) -> None:
    """Its key's ticks are still templated, through kombu's channel (``MessageTemplate``)."""
    _refuse(message, why, "kombu's channel")


def _refuse(message: TickMessage, why: str, path: str = "send_task") -> None:
    """Its key's template stays None: those ticks go through ``send_task`` this session (or,
    from ``_refuse_wire``, they stay templated but are not written as Redis commands)."""
    log.debug(
        "ticks like %s's go through %s: %s",
        message.schedule,
        path,
        why,
        extra=log_extra(Action.TEMPLATE_REFUSED, schedule=message.schedule),
    )
