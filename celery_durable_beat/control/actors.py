"""Who an operator action is recorded as, and the reason they gave (SPEC §15).

- **Actors.** A surface names its caller: the HTTP API and the console the token's name
  (``settings.TokenSpec``), the CLI ``cli:<user>@<host>``, Python code ``python:<user>@<host>``
  (``local_actor``). The name is whatever the surface says; nothing here authenticates.
- **Reasons are user text.** ``check_reason`` bounds them (``REASON_LENGTH``) and refuses
  control characters, so a reason can neither flood the store nor rewrite a terminal or a log
  line; an empty one is no reason. Reasons are stored and shown, never logged.
"""

from __future__ import annotations

import getpass
import socket
import unicodedata

from celery_durable_beat.exceptions import InvalidArgument
from celery_durable_beat.store.values import ACTOR_LENGTH, REASON_LENGTH


def local_actor(surface: str) -> str:
    """``<surface>:<user>@<host>`` for this process (``cli``, ``python``); never raises."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no login name and no USER/LOGNAME (a bare container)
        user = "unknown"
    return f"{surface}:{user}@{socket.gethostname()}"[:ACTOR_LENGTH]


REASON_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]*$"
"""What a reason may hold, as the API's schema states it: no control character (Unicode Cc)."""


def check_reason(reason: object) -> str | None:
    """The reason as stored: stripped, None when empty; InvalidArgument (field ``reason``) when
    not text, longer than ``REASON_LENGTH`` or holding a control character (``REASON_PATTERN``)
    or a lone surrogate (no store could encode it)."""
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise InvalidArgument(f"reason must be text, not {type(reason).__name__}", field="reason")
    text = reason.strip()
    if len(text) > REASON_LENGTH:
        raise InvalidArgument(
            f"reason has {len(text)} characters; shorten it to at most {REASON_LENGTH}",
            field="reason",
        )
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in text):
        raise InvalidArgument(
            "reason holds a control character (a newline, tab or escape); give one line of "
            "plain text",
            field="reason",
        )
    return text or None


def check_actor(actor: object) -> str:
    """An actor a surface passes: 1..``ACTOR_LENGTH`` characters of text."""
    if not isinstance(actor, str) or not actor.strip() or len(actor) > ACTOR_LENGTH:
        raise InvalidArgument(f"actor must be 1 to {ACTOR_LENGTH} characters of text")
    return actor.strip()
