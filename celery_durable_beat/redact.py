"""Values as they may be shown: ``durable_beat_redact`` applied to args, kwargs and options.

SPEC §2: a mapping key that contains any of the configured substrings (case-insensitive), at any
depth, has its value shown as ``***`` on every read surface and in the ``argsrepr`` /
``kwargsrepr`` of every tick message (``publish.shown_reprs``). Pure, so the control API, the
CLI, the publisher and any later surface (the console) share one definition: what is hidden on
one surface is hidden on all of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

MASK = "***"
"""What a redacted value is shown as."""

DEFAULT_KEYS = ("password", "secret", "token", "key")
"""SPEC §2's default for ``durable_beat_redact``: what is hidden when nothing is configured."""


def redact(value: Any, needles: Iterable[str]) -> Any:
    """A copy of ``value`` (JSON-like: mappings, lists, tuples, scalars) whose mapping entries
    with a key containing any needle, case-insensitively, hold ``MASK`` instead of their value.

    Keys are matched as text, so a non-string key is compared by its ``str``; sequences are
    walked too, since a secret inside a list of dicts is still a secret.
    """
    lowered = tuple(n.lower() for n in needles if n)
    return _walk(value, lowered)


def _walk(value: Any, needles: tuple[str, ...]) -> Any:
    if isinstance(value, Mapping):
        return {
            key: MASK if _hidden(key, needles) else _walk(item, needles)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_walk(item, needles) for item in value]
    return value


def _hidden(key: object, needles: tuple[str, ...]) -> bool:
    text = str(key).lower()
    return any(needle in text for needle in needles)
