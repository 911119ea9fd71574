"""Values as they may be shown: ``durable_beat_redact`` applied to args, kwargs and options.

SPEC §2: a mapping key that contains any of the configured substrings (case-insensitive), at any
depth, has its value shown as ``***`` on every read surface and in the ``argsrepr`` /
``kwargsrepr`` of every tick message (``celery_message.shown_reprs``). Pure, so the control API, the
CLI, the publisher and any later surface (the console) share one definition: what is hidden on
one surface is hidden on all of them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "***"
"""What a redacted value is shown as."""

DEFAULT_KEYS = ("password", "passwd", "secret", "token", "key", "authorization")
"""SPEC §2's default for ``durable_beat_redact`` (``password``, ``secret``, ``token``, ``key``),
plus ``passwd`` (PostgreSQL's and Unix's spelling) and ``authorization`` (an HTTP header kept in
kwargs): what is hidden when nothing is configured."""

_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s/:@]*:)[^\s/@]+@")
"""The password of a URL with credentials (``postgresql://user:secret@host/db``), anywhere in a
string value: a DSN passed as a plain kwarg (``dsn=``, ``url=``) is a secret whatever its key."""


def redact(value: Any, needles: Iterable[str]) -> Any:
    """A copy of ``value`` (JSON-like: mappings, lists, tuples, scalars) whose mapping entries
    with a key containing any needle, case-insensitively, hold ``MASK`` instead of their value.

    Keys are matched as text, so a non-string key is compared by its ``str``; sequences are
    walked too, since a secret inside a list of dicts is still a secret. Every string value
    has the password of a URL in it masked (``user:***@host``), whatever its key.
    """
    lowered = tuple(n.lower() for n in needles if n)
    return _walk(value, lowered)


CELERY_OPTIONS = frozenset(
    {
        "queue",
        "exchange",
        "exchange_type",
        "routing_key",
        "priority",
        "expires",
        "countdown",
        "eta",
        "serializer",
        "compression",
        "delivery_mode",
        "time_limit",
        "soft_time_limit",
        "ignore_result",
        "retry",
        "retry_policy",
        "shadow",
        "headers",
        "reply_to",
        "link",
        "link_error",
        "argsrepr",
        "kwargsrepr",
        "immediate",
        "mandatory",
    }
)
"""Celery's own ``apply_async`` option names: an entry's ``options`` shows these as they are
(``routing_key`` is a routing key, not a key to hide), with their values still walked, so a
secret inside ``headers`` stays hidden."""


def redact_options(options: Mapping[str, Any], needles: Iterable[str]) -> dict[str, Any]:
    """``redact`` for an entry's message ``options``: Celery's option names are never hidden
    themselves (the default needle ``key`` would hide every ``routing_key``)."""
    lowered = tuple(n.lower() for n in needles if n)
    return {
        name: _walk(value, lowered)
        if name in CELERY_OPTIONS or not _hidden(name, lowered)
        else MASK
        for name, value in options.items()
    }


def _walk(value: Any, needles: tuple[str, ...]) -> Any:
    if isinstance(value, Mapping):
        return {
            key: MASK if _hidden(key, needles) else _walk(item, needles)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_walk(item, needles) for item in value]
    if isinstance(value, str) and "@" in value:
        return _URL_PASSWORD.sub(rf"\1{MASK}@", value)
    return value


def _hidden(key: object, needles: tuple[str, ...]) -> bool:
    text = str(key).lower()
    return any(needle in text for needle in needles)
