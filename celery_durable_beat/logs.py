"""Logs as data (SPEC §10): the one way a log call of this package spells its ``extra``.

Alerts, dashboards and tests select lines on ``record.action`` (one word of
:class:`~celery_durable_beat.model.Action`) and on the named fields beside it, never on the
message text, which may be reworded. Writing every ``extra`` through ``log_extra`` keeps the
spelling in one place (procrastinate's habit): the action is always the enum's value, and a field
named like one of :class:`logging.LogRecord`'s own attributes is refused when the line is built
(``logging`` itself would raise ``KeyError`` only on the path that logs it — often an outage).

``cause`` is how a swallowed exception is named in a line: its type and the first line of its
message, so an operator sees *why* (``OperationalError: connection refused``), never just a class
name. What it shows is bounded and carries no payload: a database driver's error is taken from
the driver (``exc.orig``), not from SQLAlchemy's wrapper, whose text repeats the statement and
its parameters (a tick's arguments); URLs in it lose their passwords.
"""

from __future__ import annotations

import logging
import re

from celery_durable_beat.model import Action
from celery_durable_beat.urls import redact_url

CAUSE_LIMIT = 200
"""Most characters of an exception's message shown in a log line."""

RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
}
"""Attributes every ``LogRecord`` has: an ``extra`` key among them would overwrite one."""

_URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s'\"<>]+")


def log_extra(action: Action, **fields: object) -> dict[str, object]:
    """The ``extra=`` of one log line: ``action`` (the enum's value) and the named fields.

    Raises ``ValueError`` naming the field when it would overwrite a ``LogRecord`` attribute.
    """
    clash = RESERVED.intersection(fields)
    if clash:
        names = ", ".join(sorted(clash))
        raise ValueError(f"log field(s) {names} clash with the log record's own; rename them")
    return {"action": action.value, **fields}


def cause(exc: BaseException) -> str:
    """``Type: first line of the message`` for a log line, bounded and without secrets."""
    shown = getattr(exc, "orig", None)
    source = shown if isinstance(shown, BaseException) else exc
    text = str(source).strip().splitlines()
    first = _URL.sub(lambda m: redact_url(m.group(0)), text[0]) if text else ""
    if len(first) > CAUSE_LIMIT:
        first = first[: CAUSE_LIMIT - 1] + "…"
    name = type(exc).__name__
    return f"{name}: {first}" if first else name
