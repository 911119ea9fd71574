"""The Redis lease (``durable_beat_lease_url``): ``SET NX PX`` plus a token-checking script.

Three keys, in one hash slot (``{durable_beat}``), as a script's keys must be on a cluster:

- ``{durable_beat}:lease``        the holder's token, set with ``SET key token NX PX ttl``
- ``{durable_beat}:lease:holder`` who holds it (``hostname:pid``), with the same expiry
- ``{durable_beat}:lease:epoch``  the fencing epoch counter; never expires

Outside the default namespace (SPEC §16) the three are ``{durable_beat}:<ns>:lease``,
``{durable_beat}:<ns>:lease:holder`` and ``{durable_beat}:<ns>:lease:epoch`` (``lease_key``): each
namespace has its own leader and its own epoch, and the hash tag stays whole, so a script's keys
still share one slot. The default namespace's keys are those of releases before namespaces.

Acquire-or-renew is one Lua script, so every step is atomic on the server and expiry is Redis's
clock alone: the script renews (``PX ttl`` again) only when the key holds the caller's token
(RedBeat renewed without that check, its issue #127), reports the holder when someone else's
token is there, and when the key is free takes it with ``SET NX PX`` and ``INCR``s the epoch in the
same script. Release deletes the key only when it still holds the caller's token.

Redis can forget the counter (a restart without persistence, a failover to a lagging replica,
``FLUSHALL``, eviction), and the store may have seen higher epochs (from a store lease before the
switch to Redis). An epoch at or below the store's newest would be fenced out on every write, so
an acquisition carries a floor, the store's newest epoch read just before, and the script lifts
the counter above it. A free key is therefore first reported, without taking it, when the caller
has no floor yet; the floor costs one store read per acquisition, never one per round.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from celery_durable_beat.exceptions import LeaseError, StoreError
from celery_durable_beat.lease.base import LeaseStatus, default_holder, new_token
from celery_durable_beat.redis_client import connect
from celery_durable_beat.urls import redact_url

if TYPE_CHECKING:
    from celery_durable_beat.lease.base import HolderInfo, Lease

DEFAULT_KEY = "{durable_beat}:lease"
"""The default namespace's lease key."""
_HASH_TAG = "{durable_beat}"


def lease_key(namespace: str | None) -> str:
    """The lease key of ``namespace`` (None: the default, ``DEFAULT_KEY``); its holder and epoch
    keys follow from it (module docstring)."""
    return f"{_HASH_TAG}:{namespace}:lease" if namespace else DEFAULT_KEY


FREE, HELD, RENEWED, ACQUIRED = 0, 1, 2, 3
"""Answers of the acquire-or-renew script (its first reply element)."""

ACQUIRE_OR_RENEW = """
local lease, holder_key, epoch_key = KEYS[1], KEYS[2], KEYS[3]
local token, holder, ttl, floor = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local current = redis.call('GET', lease)
if current == token then
  redis.call('SET', lease, token, 'PX', ttl)
  redis.call('SET', holder_key, holder, 'PX', ttl)
  return {2, tonumber(redis.call('GET', epoch_key) or '0'), now + ttl, holder, ttl}
end
if current then
  local left = redis.call('PTTL', lease)
  return {1, tonumber(redis.call('GET', epoch_key) or '0'), now + left,
          redis.call('GET', holder_key) or '', left}
end
if floor == '' then
  return {0, tonumber(redis.call('GET', epoch_key) or '0'), 0, '', 0}
end
redis.call('SET', lease, token, 'NX', 'PX', ttl)
local epoch = redis.call('INCR', epoch_key)
if epoch <= tonumber(floor) then
  epoch = tonumber(floor) + 1
  redis.call('SET', epoch_key, epoch)
end
redis.call('SET', holder_key, holder, 'PX', ttl)
return {3, epoch, now + ttl, holder, ttl}
"""

RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 1
end
return 0
"""


HOLDER_INFO = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local epoch = tonumber(redis.call('GET', KEYS[3]) or '0')
local left = redis.call('PTTL', KEYS[1])
if left == -2 then
  return {0, epoch, 0, '', 0}
end
local mine = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  mine = 1
end
return {1, epoch, now + left, redis.call('GET', KEYS[2]) or '', left, mine}
"""
"""Read-only: ``{held, epoch, expires_at_ms, holder, left_ms, mine}`` in one atomic look (a
``left`` of -1, a key without expiry, is never written by this module and reads as held)."""


class RedisLease:
    """Leadership through a Redis key; expiry by Redis's clock.

    ``epoch_floor`` returns the newest epoch the store has seen (``store.leader_info().epoch``);
    it is read only when the lease is free and about to be taken.
    """

    def __init__(
        self,
        url: str,
        ttl_seconds: float = 30.0,
        *,
        epoch_floor: Callable[[], int] | None = None,
        transport_options: Mapping[str, Any] | None = None,
        key: str = DEFAULT_KEY,
        holder: str | None = None,
        token: str | None = None,
        client: Any = None,
    ) -> None:
        self.url = url
        self.shown_url = redact_url(url)
        self.ttl_seconds = ttl_seconds
        self.holder = holder or default_holder()
        self.token = token or new_token()
        self.keys = [key, f"{key}:holder", f"{key}:epoch"]
        self._ttl_ms = max(1, round(ttl_seconds * 1000))
        self._epoch_floor = epoch_floor
        self._last_epoch = 0
        self._client = (
            client if client is not None else _client(url, transport_options, ttl_seconds)
        )
        self._acquire = self._client.register_script(ACQUIRE_OR_RENEW)
        self._release = self._client.register_script(RELEASE)
        self._holder_info = self._client.register_script(HOLDER_INFO)

    def __repr__(self) -> str:
        return f"RedisLease({self.shown_url!r}, holder={self.holder!r}, ttl={self.ttl_seconds:g}s)"

    def acquire_or_renew(self) -> LeaseStatus:
        answer = self._run(self._acquire, self._ttl_ms, "")
        if answer[0] == FREE:
            answer = self._run(self._acquire, self._ttl_ms, self._floor())
        state, epoch, expires_at_ms, left = (int(answer[i]) for i in (0, 1, 2, 4))
        if state in (RENEWED, ACQUIRED):
            self._last_epoch = max(self._last_epoch, epoch)
            return LeaseStatus(True, epoch, self.holder, expires_at_ms, left)
        if state == HELD:
            holder = _text(answer[3]) or None
            return LeaseStatus(False, epoch, holder, expires_at_ms, max(0, left))
        # Free again between the two calls (the winner released at once): nobody leads now.
        return LeaseStatus(False, epoch, None, None, 0)

    def release(self) -> None:
        self._run(self._release)

    def holder_info(self) -> LeaseStatus:
        """Who holds the lease until when, by Redis's clock; takes and renews nothing (rule 5)."""
        answer = self._run(self._holder_info)
        held, epoch, expires_at_ms, left = (int(answer[i]) for i in (0, 1, 2, 4))
        if not held:
            return LeaseStatus(False, epoch, None, None, 0)
        return LeaseStatus(
            leader=bool(int(answer[5])),
            epoch=epoch,
            holder=_text(answer[3]) or None,
            expires_at_ms=expires_at_ms if left >= 0 else None,
            remaining_ms=left if left >= 0 else None,
        )

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a client that is already broken
            self._client.close()

    def _floor(self) -> int:
        """The lowest epoch the next acquisition may take: above anything the store has seen."""
        floor = self._last_epoch
        if self._epoch_floor is not None:
            try:
                floor = max(floor, self._epoch_floor())
            except StoreError as exc:
                raise LeaseError(
                    f"the Redis lease needs the store's fencing epoch to lead, and {exc}"
                ) from exc
        return floor

    def _run(self, script: Any, *args: Any) -> Any:
        import redis

        try:
            return script(keys=self.keys, args=[self.token, self.holder, *args])
        except redis.RedisError as exc:
            first = (str(exc).strip().splitlines() or [""])[0]
            raise LeaseError(
                f"the Redis lease at {self.shown_url} failed: {type(exc).__name__}: {first}"
            ) from exc


def _client(url: str, options: Mapping[str, Any] | None, ttl_seconds: float) -> Any:
    """A client whose calls fail well within the TTL instead of hanging a round: each attempt
    within a quarter of it (``redis_client.connect``), and one retry at most."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return connect(
        url,
        options,
        timeout=max(0.5, min(5.0, ttl_seconds / 4)),
        # One immediate retry: after a Redis restart or a Sentinel failover the pooled connection
        # is dead, a new one (to the master the sentinels name now) works.
        retry=Retry(NoBackoff(), 1),
        health_check_interval=30,
    )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


if TYPE_CHECKING:

    def _conforms(lease: RedisLease) -> Lease:
        """mypy proves here that RedisLease keeps the Lease protocol."""
        return lease

    def _reads_its_holder(lease: RedisLease) -> HolderInfo:
        """... and rule 5's optional read."""
        return lease
