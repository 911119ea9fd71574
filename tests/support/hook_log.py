"""The enqueue hooks (``celery_durable_beat.signals``) in a test process, connected the way a
user's app module connects them: every ``tick_enqueued`` / ``tick_skipped`` the process sends is
one JSON line in ``HOOKS_FILE`` (the sender named by its class), and with ``SLACK_WEBHOOK_URL``
set the docs' example receiver (``examples/monitoring/slack_on_skip.py``) is connected too.

``tests/support/procapp.py`` calls ``install_from_env`` when either variable is set, so a beat
process of the rig sends to them with its ``Scheduler`` as sender.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from typing import Any

from celery_durable_beat.signals import tick_enqueued, tick_skipped

HOOKS_ENV = "HOOKS_FILE"


def _write(signal: Any, sender: Any, **fields: Any) -> None:
    row = {
        "signal": signal.name,
        "sender": f"{type(sender).__module__}.{type(sender).__qualname__}",
        "pid": os.getpid(),
        "tick_is_aware_utc": _aware_utc(fields.get("tick")),
        **{k: v.isoformat() if isinstance(v, datetime) else v for k, v in fields.items()},
    }
    line = (json.dumps(row) + "\n").encode()
    fd = os.open(os.environ[HOOKS_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one short write with O_APPEND: lines never interleave
    finally:
        os.close(fd)


def _aware_utc(value: object) -> bool:
    return isinstance(value, datetime) and value.utcoffset() is not None and not value.utcoffset()


def install_from_env() -> None:
    """Connect the file receiver (``HOOKS_FILE``) and the Slack example (``SLACK_WEBHOOK_URL``)."""
    if os.environ.get(HOOKS_ENV):
        tick_enqueued.connect(_write, weak=False, dispatch_uid="tests.hook_log")
        tick_skipped.connect(_write, weak=False, dispatch_uid="tests.hook_log")
    if os.environ.get("SLACK_WEBHOOK_URL"):
        import examples.monitoring.slack_on_skip  # noqa: F401 - connects its receiver
