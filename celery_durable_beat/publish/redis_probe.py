"""Is a tick's message still on the Redis broker? The probe behind the redelivery evidence.

``RedisProbe.presence({queue: [task ids]})`` answers, for each task id, whether its message is in
one of the queue's lists (kombu keeps one per priority step: ``channel._q_for_pri``) or in
kombu's ``unacked`` hash (a message a worker fetched and has not acknowledged: a prefetch, a
running ``acks_late`` task). Read in one ``MULTI``/``EXEC`` per queue, so the lists and the hash
are one snapshot (a message moving from the list into ``unacked`` by kombu's own commands is in
one of them). kombu's client-side window — ``BRPOP`` then the ``unacked`` write — is not closed by
this: the caller needs absence on two probes apart (``redelivery.AbsenceEvidence``).
A broker that does not answer is tried once (no retries: beat's loop waits for the probe), and
every wanted tick is then ``UNKNOWN``.

A message's task id is read with one regular expression over the stored message (its headers'
``"id"`` and its properties' ``"correlation_id"``, which Celery sets to the task id in both
message protocols): no JSON parsing per element, one pass over the queue whatever the number of
wanted ticks (a substring test per wanted tick and message was 500 x 20,000 of them in a
backlog), and a false sighting only delays a redelivery. A queue
longer than ``scan_most`` messages is not scanned (``UNKNOWN``: a backlog that long is no place to
look for evidence, and a later probe or tick will tell), nor is anything when the broker does not
answer. Only ``presence`` talks to the broker, on a connection taken for the call.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from celery_durable_beat.redelivery import Presence

_TASK_ID = re.compile(rb'"(?:id|correlation_id)": ?"([^"\\]+)"')
"""A message's task id, in its headers or its properties (JSON as kombu stores it)."""
SCAN_MOST = 20_000
"""Most messages (lists and ``unacked`` together) one queue's probe reads."""


class RedisProbe:
    """The redelivery sweep's ``BrokerProbe`` on kombu's Redis transport (module docstring)."""

    def __init__(self, app: Any, scan_most: int = SCAN_MOST) -> None:
        self.app = app
        self.scan_most = scan_most

    def presence(self, wanted: Mapping[str, Sequence[str]]) -> dict[str, Presence]:
        """Each wanted task id's presence; every one ``UNKNOWN`` when the broker fails."""
        unknown = {task_id: Presence.UNKNOWN for ids in wanted.values() for task_id in ids}
        if not unknown:
            return {}
        from kombu.exceptions import OperationalError

        conn = self.app.connection_for_read()
        errors = (*conn.connection_errors, *conn.channel_errors, OSError, OperationalError)
        try:
            # One attempt, not kombu's retries (seconds of them): the sweep runs in beat's loop,
            # and a broker that does not answer now is asked again at the next sweep.
            conn.ensure_connection(max_retries=0)  # kombu: 0 retries, one attempt
            channel = conn.default_channel
            found: dict[str, Presence] = {}
            for queue, ids in wanted.items():
                found.update(self._queue(channel, queue, ids))
            return found
        except errors:
            return unknown
        finally:
            conn.release()

    def _queue(self, channel: Any, queue: str, ids: Sequence[str]) -> dict[str, Presence]:
        client = channel.client
        keys = [channel._q_for_pri(queue, pri) for pri in channel.priority_steps]
        unacked = channel.unacked_key
        with client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.llen(key)
            pipe.hlen(unacked)
            sizes = pipe.execute()
        if sum(int(size) for size in sizes) > self.scan_most:
            return dict.fromkeys(ids, Presence.UNKNOWN)
        with client.pipeline(transaction=True) as pipe:  # one snapshot: lists and unacked
            for key in keys:
                pipe.lrange(key, 0, -1)
            pipe.hvals(unacked)
            stored = [item for items in pipe.execute() for item in items]
        held = _task_ids(stored)
        return {t: Presence.PRESENT if t in held else Presence.ABSENT for t in ids}

    def close(self) -> None:
        """Nothing held between calls."""


def _task_ids(stored: Sequence[bytes | str]) -> set[str]:
    """The task ids the stored messages carry."""
    found: set[str] = set()
    for item in stored:
        raw = item if isinstance(item, bytes) else item.encode()
        found.update(match.decode() for match in _TASK_ID.findall(raw))
    return found
