"""Reading a stored definition for the control surfaces without letting one bad row fail a read.

A row may hold a definition this version cannot read: edited by hand, written by an older
version, or nested deeper than a JSON decoder recurses. The round quarantines such a row; a
read (``list``, ``show``, the console, the API) must still answer for every other row and say
what is wrong with this one. So the control queries read the definition as its stored text and
decode it here, where the few errors a decode can raise are caught and kept as a sentence on the
record (``ScheduleRecord.unreadable``), with a stand-in definition that is never enabled.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from celery_durable_beat.model import Definition
from celery_durable_beat.schedules.spec import IntervalSpec

UNREADABLE_TASK = "<unreadable>"
"""The task of the stand-in definition of an unreadable row: it names no real task."""

_DECODE_ERRORS = (ValueError, KeyError, TypeError)
"""What ``json.loads`` and ``Definition.from_json`` raise on a stored value they cannot read
(besides ``RecursionError``, for a document nested deeper than the decoder recurses): bad JSON,
a bad enum value or cron (``ValueError``; croniter's errors derive from it), a missing key, a
value of the wrong type."""


def stand_in(name: str) -> Definition:
    """The definition an unreadable row carries in its record: never enabled, never planned."""
    return Definition(name=name, task=UNREADABLE_TASK, spec=IntervalSpec(86_400_000), enabled=False)


def decode_definition(name: str, stored: str | Mapping[str, Any]) -> tuple[Definition, str | None]:
    """The definition of a stored row and None, or its stand-in and why it cannot be read.

    ``stored`` is the column's text (SQL store) or an already decoded mapping.
    """
    try:
        data = json.loads(stored) if isinstance(stored, str) else stored
        if not isinstance(data, Mapping):
            return stand_in(name), f"the stored definition is a JSON {type(data).__name__}"
        return Definition.from_json(name, data), None
    except RecursionError:
        return stand_in(name), "the stored definition is nested too deeply to be read"
    except _DECODE_ERRORS as exc:
        return stand_in(name), f"the stored definition cannot be read: {_reason(exc)}"


def _reason(exc: BaseException) -> str:
    """A short, single-line reason: the missing key or the error's own first line."""
    if isinstance(exc, KeyError):
        return f"it has no {exc.args[0]!r}" if exc.args else "a key is missing"
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]
