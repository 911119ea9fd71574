"""A template's final Redis commands, written per tick without kombu's per-message work.

``redis_template.MessageTemplate`` renders the kombu message ``send_task`` would hand to the
publish batch; kombu's Redis channel then base64-encodes the body, adds ``delivery_tag`` and
``delivery_info``, resolves the exchange to queues (``_kombu.binding.*``), picks the priority
list and JSON-encodes the whole envelope for an ``LPUSH``: per message, about half of a burst's
publishing time. Those steps give the same result for every tick of one template but for the
per-tick fields, so ``WireTemplate`` takes the commands kombu buffered for the template's own
``send_task`` (read off the batch's pipeline), and for each later tick writes the same commands
with a new envelope: the captured envelope's JSON text split around its per-tick fields, each
field JSON-encoded alone and joined in (one encoding of the message, no dict per tick), and the
body's base64 remembered per arguments. Before it is used, the template must reproduce the
captured envelope byte for byte from the captured tick (its ``delivery_tag`` and clock-dependent
expiry given back); otherwise its ticks keep going through kombu.

Routing is read once per round (a template lives for one publish session): a binding added to an
exchange in the middle of a round reaches the next round's messages, as a binding added between
two of kombu's own publishes reaches the next one.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from json.encoder import encode_basestring_ascii
from os import urandom
from typing import Any

from kombu.serialization import dumps as serialize
from kombu.utils.json import dumps as _kombu_dumps

from celery_durable_beat.message import (
    HEADER_NAMESPACE,
    HEADER_SCHEDULE,
    HEADER_TASK_NAME,
    HEADER_TICK_MS,
    HEADER_TRIGGER,
    TickMessage,
    tick_headers,
)

BODY_CACHE_SIZE = 10_000
"""Distinct arguments whose encoded body a wire template remembers."""

_TICK_FIELDS: tuple[tuple[str, str], ...] = (
    ("headers", "id"),
    ("headers", "root_id"),
    ("headers", "argsrepr"),
    ("headers", "kwargsrepr"),
    ("headers", "expires"),
    ("headers", HEADER_SCHEDULE),
    ("headers", HEADER_TASK_NAME),
    ("headers", HEADER_NAMESPACE),
    ("headers", HEADER_TICK_MS),
    ("headers", HEADER_TRIGGER),
    ("properties", "correlation_id"),
    ("properties", "argsrepr"),
    ("properties", "kwargsrepr"),
    ("properties", "expiration"),
    ("properties", "delivery_tag"),
)
"""The envelope's per-tick fields besides ``body`` (``expiration`` only when it has one)."""

Command = tuple[Any, ...]
"""One buffered Redis command as redis-py keeps it: ``("LPUSH", key, payload)``."""


class WireRefused(Exception):
    """The captured commands cannot be repeated per tick (the reason is the message)."""


class WireTemplate:
    """The commands of one template, repeatable for any tick of its key."""

    def __init__(self, commands: Sequence[Command], serializer: str, embed: Any) -> None:
        payloads = {c[2] for c in commands if c[0].upper() == "LPUSH" and len(c) == 3}
        if len(payloads) != 1:
            raise WireRefused("not one message pushed to one or more lists")
        self.payload: str = payloads.pop()
        self.commands = [tuple(c) for c in commands]
        self.serializer = serializer
        self.embed = embed
        # One LPUSH alone can carry many ticks' payloads in one command (``lpush_key``).
        only = self.commands[0] if len(self.commands) == 1 else None
        self.lpush_key: str | None = None if only is None else str(only[1])
        envelope = json.loads(self.payload)
        if envelope["properties"].get("body_encoding") != "base64":
            raise WireRefused("the body is not base64-encoded")
        present = [("body", "")] + [
            (part, key) for part, key in _TICK_FIELDS if key in envelope[part]
        ]
        self.fields, self.fragments = _split(envelope, present)
        self._bodies: dict[str, str] = {}

    def body(self, args: Any, kwargs: Any) -> str:
        """The base64 body of ``(args, kwargs, embed)`` as kombu's channel encodes it."""
        key = repr((args, kwargs))
        encoded = self._bodies.get(key)
        if encoded is None:
            _, _, data = serialize(  # type: ignore[no-untyped-call]
                (list(args) or (), dict(kwargs), self.embed), serializer=self.serializer
            )
            raw = data if isinstance(data, bytes) else data.encode("utf-8")
            encoded = base64.b64encode(raw).decode("ascii")
            if len(self._bodies) < BODY_CACHE_SIZE:
                self._bodies[key] = encoded
        return encoded

    def payload_of(self, values: dict[tuple[str, str], Any]) -> str:
        """The envelope's JSON text with ``values`` (every field of ``fields``) spliced in."""
        fragments = self.fragments
        parts = [fragments[0]]
        for field, fragment in zip(self.fields, fragments[1:], strict=True):
            parts.append(_json(values[field]))
            parts.append(fragment)
        return "".join(parts)

    def commands_for(self, payload: str) -> list[Command]:
        """The template's commands, each push carrying ``payload``."""
        return [(*c[:2], payload) if c[2:] == (self.payload,) else c for c in self.commands]


class WireWriter:
    """Puts written ticks on the pipeline of kombu's publish batch, in publish order.

    Consecutive payloads for one list wait in ``_pushes`` and go on as one ``LPUSH`` (oldest
    first, as separate pushes would leave them) before anything else is added: another list's
    tick, a template's other commands, or a tick kombu itself publishes (``flush_pushes``)."""

    def __init__(self) -> None:
        self.pipeline: Any = None
        self._push_key: str | None = None
        self._pushes: list[str] = []

    def adopt(self, pipeline: Any) -> bool:
        """Whether ``pipeline`` is the one this writer writes to (the first one seen is)."""
        if self.pipeline is None:
            self.pipeline = pipeline
        return pipeline is self.pipeline

    def write(self, wire: WireTemplate, payload: str) -> None:
        if wire.lpush_key is None:
            self.flush_pushes()
            for command in wire.commands_for(payload):
                self.pipeline.execute_command(*command)
            return
        if wire.lpush_key != self._push_key:
            self.flush_pushes()
            self._push_key = wire.lpush_key
        self._pushes.append(payload)

    def flush_pushes(self) -> None:
        if self._pushes:
            self.pipeline.execute_command("LPUSH", self._push_key, *self._pushes)
            self._pushes = []
        self._push_key = None

    def unsent(self) -> int:
        """Commands on the pipeline not yet executed (after ``flush_pushes``)."""
        return 0 if self.pipeline is None else len(self.pipeline)

    def execute(self) -> None:
        """Run the pipeline; on failure it is emptied (what it held is uncertain) and the
        error raised."""
        try:
            self.pipeline.execute()
        except BaseException:
            self.pipeline.reset()
            raise


def tick_values(
    message: TickMessage, reprs: tuple[str, str], expires: str | None, expiration: float | None
) -> dict[tuple[str, str], Any]:
    """The envelope's per-tick fields of ``message`` but its body and ``delivery_tag``, as
    ``MessageTemplate.render`` sets them (``expires`` and ``expiration`` from its ``expiry``)."""
    argsrepr, kwargsrepr = reprs
    task_id = message.task_id
    values: dict[tuple[str, str], Any] = {
        ("headers", "id"): task_id,
        ("headers", "root_id"): task_id,
        ("headers", "argsrepr"): argsrepr,
        ("headers", "kwargsrepr"): kwargsrepr,
        ("headers", "expires"): expires,
        ("properties", "correlation_id"): task_id,
        ("properties", "argsrepr"): argsrepr,
        ("properties", "kwargsrepr"): kwargsrepr,
    }
    values.update((("headers", k), v) for k, v in tick_headers(message).items())
    if expiration is not None:
        values[("properties", "expiration")] = str(int(expiration * 1000))
    return values


def kombu_json(value: Any) -> str:
    """kombu's own JSON text of ``value``, as its Redis channel writes an envelope."""
    return str(_kombu_dumps(value))  # type: ignore[no-untyped-call]


def _json(value: Any) -> str:
    """``value`` as kombu's JSON encodes it; the types of the per-tick fields directly (the
    capture's byte-for-byte check proves the two agree)."""
    kind = type(value)
    if kind is str:
        return encode_basestring_ascii(value)
    if kind is int:
        return str(value)
    if value is None:
        return "null"
    return kombu_json(value)


def new_delivery_tag() -> str:
    """A random RFC 4122 version-4 UUID, as kombu's virtual channel makes one
    (``kombu.utils.uuid``: ``str(uuid4())``), in a third of the time: formatted straight from
    the 16 random bytes, with the version and variant bits set as ``uuid4`` sets them."""
    h = urandom(16).hex()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[int(h[16], 16) & 3]}{h[17:20]}-{h[20:]}"


_VARIANT = "89ab"
"""The first hex digit of the fourth group of an RFC 4122 UUID: binary 10xx."""


def _split(
    envelope: dict[str, Any], fields: Sequence[tuple[str, str]]
) -> tuple[list[tuple[str, str]], list[str]]:
    """The fields in the order the envelope's JSON text has them, and the text cut at each."""
    marked = json.loads(json.dumps(envelope))
    marks = {}
    for n, (part, key) in enumerate(fields):
        mark = f"\x00wire-field-{n}\x00"
        if part == "body":
            marked["body"] = mark
        else:
            marked[part][key] = mark
        marks[(part, key)] = kombu_json(mark)
    text = kombu_json(marked)
    ordered = sorted(fields, key=lambda field: text.find(marks[field]))
    fragments = []
    for field in ordered:
        before, found, text = text.partition(marks[field])
        if not found:
            raise WireRefused(f"the envelope's {'.'.join(field)} was not found")
        fragments.append(before)
    fragments.append(text)
    return ordered, fragments
