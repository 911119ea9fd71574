"""``RedisClaims``: the dedup claims (``Claims`` in ``base.py``) as Redis keys.

A claim says which delivery of a tick holds it and in what state: one string key per task id,
``durable_beat:run:<task id>`` = ``<state>|<attempt>|<owner>``, changed only by the Lua scripts
below so every check-and-set is atomic; the key's expiry is the claim's: ``run_ttl`` while
running (pushed on by heartbeats), ``dedup_ttl`` once finished. An expired claim is an absent
key, so rule 1's "absent or expired" is one test here. Each claim also sets a marker,
``durable_beat:claimed:<task id>``, for ``dedup_ttl`` (rule 6's ``ever_claimed``). Run tracking
stays in the store, which mirrors every write (``runs/factory.py`` says when Redis holds the
claims).

Namespaces (rule 9 of ``base.py``): outside the default namespace every key has the namespace
after ``durable_beat:`` — ``durable_beat:<ns>:run:<task id>``, ``durable_beat:<ns>:claimed:<task
id>``, ``durable_beat:<ns>:counters`` — so one Redis database holds several apps' keys apart (and
``SCAN durable_beat:<ns>:*`` finds one app's). A tick's keys are its id's namespace's (the id
carries it, so the prefix is string work, no round trip); the counters are the namespace the
claims were built with. The default namespace's keys are those of releases before namespaces.
The scripts build no key: each gets its keys from here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from celery_durable_beat.redis_client import connect
from celery_durable_beat.runs.base import RunKey, RunState, RunWrite, tick_namespace

if TYPE_CHECKING:
    from celery_durable_beat.runs.base import Claims

KEY_ROOT = "durable_beat:"
"""What every key of the claims starts with, the namespace after it outside the default."""
KEY_PREFIX = "durable_beat:run:"
MARKER_PREFIX = "durable_beat:claimed:"
"""A marker each claim sets for ``dedup_ttl``: the claim key lapses with its run's dead worker
(``run_ttl``), and the redelivery sweep must still know a worker had the tick (rule 6)."""
COUNTERS_KEY = "durable_beat:counters"
"""The default namespace's prefixes and counters key; ``namespaced`` gives another's."""
DEFAULT_MARKER_TTL_MS = 86_400_000
"""``durable_beat_dedup_ttl``'s default."""
REDIS_TIMEOUT_S = 2.0
"""Socket timeouts of the guard's Redis client: a task must not hang on a dead Redis."""

# One settle (rule 2): key, owner, new value, ttl_ms, mode; true when written.
_SETTLE_ONE = """
local function settle_one(key, owner, value, ttl, mode)
  local v = redis.call('GET', key)
  local ok = false
  if mode == 'always' then
    ok = true
  elseif mode == 'owner' then
    ok = (not v) or string.match(v, '^[^|]*|[^|]*|(.*)$') == owner
  elseif mode == 'unfinished' then
    local state = v and string.match(v, '^([^|]*)|')
    ok = v and state ~= 'succeeded' and state ~= 'failed' and state ~= 'revoked'
      and state ~= 'expired'
    if ok then  -- the row keeps its owner, as the store's update does
      value = string.match(value, '^[^|]*|[^|]*|') .. string.match(v, '^[^|]*|[^|]*|(.*)$')
    end
  elseif mode == 'unless_ended_otherwise' then
    local state = v and string.match(v, '^([^|]*)|')
    ok = (not v) or state == string.match(value, '^([^|]*)|') or (state ~= 'succeeded'
      and state ~= 'failed' and state ~= 'revoked' and state ~= 'expired')
  elseif mode == 'revoke' or mode == 'not_started' then  -- absent, expired or retried
    ok = (not v) or string.match(v, '^([^|]*)|') == 'retried'
  end
  if ok then
    redis.call('SET', key, value, 'PX', ttl)
  end
  return ok
end
"""

# KEYS settle keys; ARGV four per key (owner, value, ttl_ms, mode). How many were written.
_SETTLE_MANY = (
    _SETTLE_ONE
    + """
local n = 0
for i, key in ipairs(KEYS) do
  local a = (i - 1) * 4
  if settle_one(key, ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]) then
    n = n + 1
  end
end
return n
"""
)

# KEYS[1] the claim key, KEYS[2] its marker, then settle keys; ARGV owner, attempt, ttl_ms,
# marker_ttl_ms, then four per settle key as ``_SETTLE_MANY``. The settles first, in order, then
# the claim (rule 1): nil when claimed (the marker set), else the stored value that refused it.
_CLAIM = (
    _SETTLE_ONE
    + """
for i = 3, #KEYS do
  local a = 4 + (i - 3) * 4
  settle_one(KEYS[i], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4])
end
local v = redis.call('GET', KEYS[1])
if v then
  local state, attempt, owner = string.match(v, '^([^|]*)|([^|]*)|(.*)$')
  local retry = state == 'retried' and tonumber(ARGV[2]) >= (tonumber(attempt) or 0)
  local again = state == 'started' and owner == ARGV[1]
  if not (retry or again) then
    return v
  end
end
redis.call('SET', KEYS[1], 'started|' .. ARGV[2] .. '|' .. ARGV[1], 'PX', ARGV[3])
redis.call('SET', KEYS[2], '1', 'PX', ARGV[4])
return false
"""
)

# KEYS claim keys; ARGV[1] ttl_ms, then one owner per key. How many were pushed on.
_HEARTBEAT = """
local n = 0
for i, key in ipairs(KEYS) do
  local v = redis.call('GET', key)
  if v and string.sub(v, 1, 8) == 'started|'
     and string.match(v, '^[^|]*|[^|]*|(.*)$') == ARGV[i + 1] then
    n = n + redis.call('PEXPIRE', key, ARGV[1])
  end
end
return n
"""

# KEYS[1] claim key; ARGV owner. Drops the claim if this owner still holds it.
_RELEASE = """
local v = redis.call('GET', KEYS[1])
if v and string.match(v, '^[^|]*|[^|]*|(.*)$') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def namespaced(key: str, namespace: str | None) -> str:
    """``key`` (one of the default namespace's, above) in ``namespace``: ``durable_beat:run:``
    becomes ``durable_beat:<ns>:run:``; the default namespace's is ``key`` itself."""
    if not namespace:
        return key
    return f"{KEY_ROOT}{namespace}:{key[len(KEY_ROOT) :]}"


def claim_key(task_id: str) -> str:
    """The claim of a tick: ``durable_beat:run:<id>``, ``durable_beat:<ns>:run:<id>`` for an id
    of the namespace ``ns``."""
    return _tick_key(KEY_PREFIX, task_id, tick_namespace(task_id))


def marker_key(task_id: str) -> str:
    """The claimed marker of a tick, prefixed as its claim (``claim_key``)."""
    return _tick_key(MARKER_PREFIX, task_id, tick_namespace(task_id))


def _tick_key(prefix: str, task_id: str, namespace: str | None) -> str:
    """A tick's key under one of the default namespace's prefixes, in ``namespace`` (the id's,
    which a ``RunKey`` has read once already)."""
    return namespaced(prefix, namespace) + task_id if namespace else prefix + task_id


def run_key(key: RunKey) -> str:
    """``claim_key`` of a run's key."""
    return _tick_key(KEY_PREFIX, key.task_id, key.namespace)


def claim_value(state: RunState, attempt: int, owner: str) -> str:
    """The stored value of a claim (``|`` in an owner would split it: replaced)."""
    return f"{state.value}|{attempt}|{owner.replace('|', '/')}"


def parse_state(value: bytes | str | None) -> RunState:
    """The state part of a stored claim value."""
    if value is None:
        return RunState.UNKNOWN
    text = value.decode() if isinstance(value, bytes) else value
    try:
        return RunState(text.split("|", 1)[0])
    except ValueError:
        return RunState.UNKNOWN


class RedisClaims:
    """Claims as Redis keys (module docstring). Building one never connects."""

    where = "the dedup Redis"

    def __init__(
        self,
        url: str,
        transport_options: Mapping[str, Any] | None = None,
        marker_ttl_ms: int = DEFAULT_MARKER_TTL_MS,
        *,
        namespace: str | None = None,
    ) -> None:
        """``url`` in any form ``redis_client`` takes; ``transport_options`` name a sentinel
        URL's master (the lease's, or the broker's when the claims share the broker);
        ``marker_ttl_ms``: how long ``ever_claimed`` remembers a claim (``dedup_ttl``);
        ``namespace``: the one the shared counters are of (the ticks' keys are their ids')."""
        import redis

        from celery_durable_beat.runs.redis_lua import LuaScript

        self.url = url
        self.namespace = namespace
        self.counters_key = namespaced(COUNTERS_KEY, namespace)
        self.marker_ttl_ms = max(1, marker_ttl_ms)
        self.client: Any = connect(url, transport_options, timeout=REDIS_TIMEOUT_S)
        self.errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self._claim = LuaScript(self.client, _CLAIM)
        self._settle = LuaScript(self.client, _SETTLE_MANY)
        self._heartbeat = LuaScript(self.client, _HEARTBEAT)
        self._release = LuaScript(self.client, _RELEASE)

    key = staticmethod(claim_key)
    marker = staticmethod(marker_key)

    def claim(
        self, key: RunKey, owner: str, attempt: int, ttl_ms: int, settles: Sequence[RunWrite] = ()
    ) -> RunState | None:
        keys = [run_key(key), _tick_key(MARKER_PREFIX, key.task_id, key.namespace)]
        args: list[str | int] = [_held(owner), attempt, max(1, ttl_ms), self.marker_ttl_ms]
        for write in settles:
            keys.append(run_key(write.key))
            args += _settle_args(write)
        found = self._claim(keys=keys, args=args)
        return parse_state(found) if found else None  # Lua's false: nil, or RESP3's false

    def settle(self, write: RunWrite) -> bool:
        return bool(self._settle(keys=[run_key(write.key)], args=_settle_args(write)))

    def settle_many(self, writes: Sequence[RunWrite]) -> None:
        if not writes:
            return
        keys = [run_key(write.key) for write in writes]
        args = [arg for write in writes for arg in _settle_args(write)]
        self._settle(keys=keys, args=args)

    def mark_revoked(self, key: RunKey, owner: str, keep_ms: int) -> bool:
        """``revoked`` for a tick not started yet (absent or waiting for a retry)."""
        value = claim_value(RunState.REVOKED, 0, owner)
        args: list[str | int] = [_held(owner), value, max(1, keep_ms), "revoke"]
        return bool(self._settle(keys=[run_key(key)], args=args))

    def heartbeat(self, held: Sequence[tuple[str, str]], ttl_ms: int) -> None:
        if not held:
            return
        keys = [self.key(task_id) for task_id, _owner in held]
        args: list[str | int] = [max(1, ttl_ms)]
        args += [_held(owner) for _task_id, owner in held]
        self._heartbeat(keys=keys, args=args)

    def release(self, task_id: str, owner: str) -> None:
        self._release(keys=[self.key(task_id)], args=[_held(owner)])

    def state(self, task_id: str) -> RunState | None:
        value = self.client.get(self.key(task_id))
        return None if value is None else parse_state(value)

    def ever_claimed(self, task_ids: Sequence[str]) -> set[str]:
        """One MGET of the claims' markers and the claims themselves (a claim made by a worker
        of an earlier version, during a rolling upgrade, has no marker)."""
        if not task_ids:
            return set()
        found = self.client.mget(
            [self.marker(t) for t in task_ids] + [self.key(t) for t in task_ids]
        )
        count = len(task_ids)
        return {
            t
            for i, t in enumerate(task_ids)
            if found[i] is not None or found[count + i] is not None
        }

    def count(self, name: str) -> None:
        self.client.hincrby(self.counters_key, name, 1)

    def counters(self) -> dict[str, int]:
        raw = self.client.hgetall(self.counters_key)
        return {k.decode(): int(v) for k, v in raw.items()}

    def close(self) -> None:
        self.client.close()


def _settle_args(write: RunWrite) -> list[str | int]:
    """The four script arguments of one settle: owner, new value, ttl_ms, mode."""
    value = claim_value(write.state, write.attempt, write.owner)
    return [_held(write.owner), value, max(1, write.keep_ms), write.write_if.value]


def _held(owner: str) -> str:
    """The owner part of a stored value, as the scripts compare it."""
    return claim_value(RunState.STARTED, 0, owner).split("|", 2)[2]


if TYPE_CHECKING:

    def _conforms(claims: RedisClaims) -> Claims:
        """mypy proves here that RedisClaims keeps the whole Claims protocol."""
        return claims
