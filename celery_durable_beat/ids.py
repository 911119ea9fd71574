"""Identity of ticks: task ids and the deterministic jitter.

A tick is (schedule, planned instant). Its task id is derived from that identity alone, so a
replayed publish of the same tick carries the same id and can be recognised downstream. The id is
readable because Flower shows no custom headers but finds a task by any part of its id.

The id's shape is defined once, here, for both directions (SPEC §4): ``KEY@INSTANT`` for an
automatic tick (``tick_task_id``), ``KEY@manual-HEX32`` for a manual run (``manual_task_id``),
where KEY is ``schedule_key`` of the name; ``is_tick_id`` recognises exactly those (the worker
uses it to let events of other task ids cost nothing). The pieces below build both sides.

An id is at most ``TASK_ID_MAX`` characters, the width of the ``task_id`` column of Celery's
database result backend (``celery.backends.database.models.Task``): a longer id made that
backend fail on every tick (a solo worker died of it). When KEY@SUFFIX would be longer, KEY is
cut and ends in ``-`` and the first 8 hex digits of the SHA-1 of the lower-cased name
(``_fitted_key``), so ids stay distinct, readable and deterministic.

Outside the default namespace (SPEC §16) every id starts with ``<namespace>:``
(``nightly@…`` becomes ``billing:nightly@…``), counted within the same ``TASK_ID_MAX``: two apps
sharing a worker pool, one Redis and one store never share a tick id, so neither's guard
refuses the other's tick. The default namespace (``None``) keeps the ids it always had.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from datetime import datetime, timezone
from functools import lru_cache

TASK_ID_MAX = 155
"""The longest task id beat makes (SPEC §4): Celery's database result backend's column."""
_KEY_CHARS = "a-z0-9._-"
"""What a schedule key is made of; every other character of a name becomes ``-``."""
_OUTSIDE_KEY = re.compile(f"[^{_KEY_CHARS}]+")
_MANUAL = "manual-"
_MANUAL_HEX = 32
"""Hex digits after ``manual-``: a random uuid4, or a digest of the idempotency key."""
_INSTANT = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{3})?Z"
"""``format_tick_instant``'s output."""
NAMESPACE_PATTERN = "[a-z0-9_-]{1,40}"
"""A namespace's name (SPEC §2, ``durable_beat_namespace``): it becomes part of task ids and Redis
keys, so it is kept to characters neither needs to escape, and contains no ``:``."""
_TICK_ID = re.compile(
    f"(?:{NAMESPACE_PATTERN}:)?[{_KEY_CHARS}]+@(?:{_INSTANT}|{_MANUAL}[0-9a-f]{{{_MANUAL_HEX}}})"
)


def name_key(name: str) -> str:
    """How schedule names compare: case-insensitively (SPEC §3).

    The one definition of the key that rows, audit records, runs and ``beat_schedule`` entries
    are matched by; every store backend and the config check call it.
    """
    return name.lower()


def schedule_key(name: str) -> str:
    """The id-safe key of a schedule name (SPEC §4).

    Lower-cased; each run of characters outside ``[a-z0-9._-]`` becomes ``-``; when that changed
    anything, ``-`` and the first 8 hex digits of the SHA-1 of the lower-cased name follow, so two
    distinct names never share a key.
    """
    lowered = name_key(name)
    key = _OUTSIDE_KEY.sub("-", lowered)
    if key != lowered:
        key = f"{key}-{_digest8(lowered)}"
    return key


def _digest8(lowered: str) -> str:
    return hashlib.sha1(lowered.encode("utf-8"), usedforsecurity=False).hexdigest()[:8]


def _fitted_key(name: str, suffix: str, namespace: str | None = None) -> str:
    """``schedule_key(name)``, cut so that [NS:]KEY@SUFFIX fits ``TASK_ID_MAX`` (module
    docstring): the cut key keeps as much of the name as fits, then ``-`` and the name's 8-hex
    digest."""
    key = schedule_key(name)
    room = TASK_ID_MAX - 1 - len(suffix) - (len(namespace) + 1 if namespace else 0)
    if len(key) <= room:
        return key
    return f"{key[: room - 9]}-{_digest8(name_key(name))}"


def _task_id(name: str, suffix: str, namespace: str | None = None) -> str:
    key = _fitted_key(name, suffix, namespace)
    return f"{namespace}:{key}@{suffix}" if namespace else f"{key}@{suffix}"


@lru_cache(maxsize=512)
def format_tick_instant(tick_ms: int) -> str:
    """ISO 8601 UTC with ``Z``; ``.mmm`` only when the tick has milliseconds. Remembered for
    the last few hundred instants: the ticks of a burst mostly share theirs."""
    seconds, millis = divmod(tick_ms, 1000)
    base = datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{millis:03d}Z" if millis else f"{base}Z"


def tick_task_id(name: str, tick_ms: int, namespace: str | None = None) -> str:
    """The Celery task id of an automatic tick, e.g. ``nightly-digest@2026-11-30T03:00:00Z``
    (``billing:nightly-digest@…`` in the namespace ``billing``)."""
    return _task_id(name, format_tick_instant(tick_ms), namespace)


def manual_task_id(
    name: str, idempotency_key: str | None = None, namespace: str | None = None
) -> str:
    """The task id of a manual run: derived from the idempotency key when given, else random."""
    if idempotency_key is None:
        suffix = uuid.uuid4().hex
    else:
        material = f"{name_key(name)}\x00{idempotency_key}".encode()
        suffix = hashlib.sha256(material).hexdigest()[:_MANUAL_HEX]
    return _task_id(name, f"{_MANUAL}{suffix}", namespace)


def id_namespace(task_id: str) -> str | None:
    """The namespace a tick id was made in (None: the default), read from its ``NS:`` prefix."""
    head, sep, _ = task_id.partition(":")
    return head if sep and "@" not in head else None


def is_tick_id(task_id: str) -> bool:
    """Whether ``task_id`` has the shape of a tick's id, automatic or manual (the module
    docstring); any string beat did not make that way is not one."""
    return _TICK_ID.fullmatch(task_id) is not None


def jitter_offset_ms(name: str, tick_ms: int, jitter_seconds: float) -> int:
    """A deterministic delay in [0, jitter] for (schedule, tick), in milliseconds.

    Derived from a hash rather than a random draw so every beat, and every replay of the same
    tick, waits the same amount: the dispatch instant is part of the tick's identity contract.
    """
    jitter_ms = round(jitter_seconds * 1000)
    if jitter_ms <= 0:
        return 0
    digest = hashlib.sha256(f"{name_key(name)}@{tick_ms}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % (jitter_ms + 1)
