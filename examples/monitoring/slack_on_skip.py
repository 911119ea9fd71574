"""Tell a Slack channel when beat skips a tick someone should act on (docs/monitoring.md).

Beat records a tick ``skipped`` for several reasons; three of them mean a job did not run and
nobody may have noticed:

- ``no_worker``: a ``require_worker`` schedule found no live worker consuming its queue;
- ``quarantined``: the schedule failed for its own reasons K times in a row and waits for a fix;
- ``missed``: beat was down (or the schedule paused) over ticks its missed-run policy dropped.

Copy this file next to your Celery app and import it in the module beat loads (``-A proj``), so
the receiver is connected in the beat process::

    # proj.py
    app = Celery("proj")
    ...
    import slack_on_skip  # noqa: E402,F401  (connects the receiver)

and give beat the webhook: ``SLACK_WEBHOOK_URL=https://hooks.slack.com/services/...`` (any
endpoint that takes ``{"text": ...}`` works: Mattermost, Rocket.Chat, Teams' incoming webhooks).
With the variable unset the receiver does nothing.

Why a thread: a receiver runs inside beat's round, right after the round's records are
committed. An HTTP call there would hold up every schedule after it, so the receiver only puts
the message on a bounded queue and one daemon thread posts it, with a short timeout. A full
queue (Slack down during a storm of skips) drops messages, counted in the next one sent; a post
that fails is logged without the webhook URL, which is a secret.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import urllib.request
from datetime import datetime
from typing import Any

from celery_durable_beat.signals import tick_skipped

WEBHOOK_ENV = "SLACK_WEBHOOK_URL"
"""The environment variable holding the webhook URL (read at each skip: set it, no restart)."""
REASONS = frozenset({"no_worker", "quarantined", "missed"})
"""The skip reasons worth a message; ``overlap`` and ``too_late`` are usually by design."""
TIMEOUT_S = 5.0
"""How long one post may take before it is given up."""
BACKLOG = 100
"""Most messages waiting to be posted; more are dropped (and counted)."""

log = logging.getLogger("slack_on_skip")

_WHY = {
    "no_worker": "no live worker consumes its queue (require_worker), so it was not sent",
    "quarantined": "it is quarantined after failing for its own reasons; fix it, then run "
    "`celery -A proj durable-beat resume {schedule}`",
    "missed": "beat was not running then; its missed-run policy dropped it",
}


class _Poster:
    """One daemon thread posting queued texts; started on the first skip, so importing this
    module in a worker (which never skips) starts nothing."""

    def __init__(self) -> None:
        self.texts: queue.Queue[tuple[str, str]] = queue.Queue(BACKLOG)
        self.dropped = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def submit(self, url: str, text: str) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="slack-on-skip", daemon=True)
                self._thread.start()
            try:
                self.texts.put_nowait((url, text))
            except queue.Full:
                self.dropped += 1

    def _run(self) -> None:
        while True:
            url, text = self.texts.get()
            with self._lock:
                dropped, self.dropped = self.dropped, 0
            if dropped:
                text += f"\n({dropped} more skip message(s) dropped while Slack did not keep up)"
            post(url, text)


_poster = _Poster()


def post(url: str, text: str) -> bool:
    """POST ``{"text": text}`` to ``url``; whether the endpoint answered 2xx. Never raises."""
    if not url.startswith(("https://", "http://")):
        log.warning("%s is not an http(s) URL; nothing posted", WEBHOOK_ENV)
        return False
    body = json.dumps({"text": text}).encode()
    request = urllib.request.Request(  # noqa: S310 - the scheme is checked above: http(s) only
        url, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:  # noqa: S310 - as above
            return bool(200 <= answer.status < 300)
    except (OSError, ValueError) as exc:  # URLError and HTTPError are OSErrors; never the URL
        log.warning("posting a skip to Slack failed: %s", type(exc).__name__)
        return False


def message(
    schedule: str, tick: datetime, reason: str, count: int = 1, last_tick: datetime | None = None
) -> str:
    """The text of one skip, e.g. ``:warning: nightly-report skipped its tick of
    2026-05-28 03:00 UTC: no live worker consumes its queue ...``."""
    when = f"its tick of {_instant(tick)}"
    if count > 1 and last_tick is not None:
        when = f"{count} ticks, {_instant(tick)} to {_instant(last_tick)}"
    why = _WHY.get(reason, reason).format(schedule=schedule)
    return f":warning: *{schedule}* skipped {when}: {why}"


def _instant(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC")


def post_skip(
    sender: Any,
    schedule: str,
    tick: datetime,
    reason: str,
    count: int = 1,
    last_tick: datetime | None = None,
    **kwargs: Any,
) -> None:
    """The receiver: queue a message for the reasons above; returns at once."""
    url = os.environ.get(WEBHOOK_ENV)
    if not url or reason not in REASONS:
        return
    _poster.submit(url, message(schedule, tick, reason, count, last_tick))


tick_skipped.connect(post_skip)  # or ``@tick_skipped.connect`` above the function: the same
