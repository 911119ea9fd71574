"""Is a tick's message still on the Redis broker? The probe behind the redelivery evidence.

``RedisProbe.presence({queue: [task ids]})`` answers, for each task id, whether its message is in
one of the queue's lists (kombu keeps one per priority step: ``channel._q_for_pri``) or in
kombu's ``unacked`` hash (a message a worker fetched and has not acknowledged: a prefetch, a
running ``acks_late`` task). Read in one ``MULTI``/``EXEC`` per queue, so the lists and the hash
are one snapshot (a message moving from the list into ``unacked`` by kombu's own commands is in
one of them). kombu's client-side window — ``BRPOP`` then the ``unacked`` write — is not closed by
this: the caller needs absence on two probes apart (``redelivery.AbsenceEvidence``).

A task id is found by a plain substring test on the stored message (``"id": "<task id>"`` in its
headers): no JSON parsing per element, and a false sighting only delays a redelivery. A queue
longer than ``scan_most`` messages is not scanned (``UNKNOWN``: a backlog that long is no place to
look for evidence, and a later probe or tick will tell), nor is anything when the broker does not
answer. Only ``presence`` talks to the broker, on a connection taken for the call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from celery_durable_beat.redelivery import Presence

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
        conn = self.app.connection_for_read()
        errors = (*conn.connection_errors, *conn.channel_errors, OSError)
        try:
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
        return {task_id: _presence(task_id, stored) for task_id in ids}

    def close(self) -> None:
        """Nothing held between calls."""


def _presence(task_id: str, stored: Sequence[bytes | str]) -> Presence:
    needle = f'"{task_id}"'
    raw = needle.encode()
    for item in stored:
        if (raw in item) if isinstance(item, bytes) else (needle in item):
            return Presence.PRESENT
    return Presence.ABSENT
