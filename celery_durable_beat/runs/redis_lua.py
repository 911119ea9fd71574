"""``LuaScript``: a Lua script called the short way, on a connection of the client's own pool.

Why not redis-py's ``Script``: a guarded tick makes one script call (its claim, carrying the
previous run's end), and through ``Script`` that call spent a median 180 µs of the worker's CPU
(230 between 1 ms of other work) on this project's 2-core VMs, against 130 (175) packed here once
and sent on a connection of the same pool: redis-py packs a command argument by argument and
wraps each call in its retry, observability and maintenance-notification layers
(``bench/redis_claim_cost.py``, four rounds). A plain worker on a Redis broker spends about
1.0-1.6 ms of CPU a tick, so 0.8x leaves the guard about 250-400 µs: the 50 saved are a sixth of
it.

The connection is checked out of the client's pool and given back for every call, so the pool
does what it does for any command: a connection the server closed is replaced before use, a
Sentinel client's connection asks the sentinels for the master when it connects, a forked
process makes its own, and ``max_connections`` counts it. A call that fails other than with an
error reply (a timeout, a dropped connection, an exception raised into the thread meanwhile)
disconnects its connection before giving it back: its reply may still be on the way, and must
never be read as the answer to the next call. Nothing is sent twice (the client's retries are
off, as redis-py's are for a client made from a URL); a failed call raises, and the guard's
circuit takes over. A server that lost its script cache (a restart, ``SCRIPT FLUSH``) answers
``NOSCRIPT``; the call is then sent with the script's text, which caches it again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from redis.exceptions import NoScriptError, ResponseError

Arg = str | int | bytes


def pack(*parts: Arg) -> bytes:
    """One command in RESP: an array of bulk strings."""
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        if isinstance(part, bool):
            raise TypeError("a Redis argument is a string, bytes or an int, not a bool")
        data = part if isinstance(part, bytes) else str(part).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


class LuaScript:
    """One Lua script of a redis-py client (module docstring)."""

    def __init__(self, client: Any, source: str) -> None:
        self._pool = client.connection_pool
        self.source = source.encode()
        self.sha = hashlib.sha1(self.source).hexdigest().encode()  # noqa: S324 - Redis's name

    def __call__(self, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        """What the script returns (``EVALSHA``); raises redis-py's errors."""
        tail = (len(keys), *keys, *args)
        try:
            return self._send(pack(b"EVALSHA", self.sha, *tail))
        except NoScriptError:
            return self._send(pack(b"EVAL", self.source, *tail))

    def _send(self, packed: bytes) -> Any:
        conn = self._pool.get_connection()
        try:
            conn.send_packed_command([packed], check_health=False)
            return conn.read_response()
        except ResponseError:
            raise  # an error reply: the connection is in step
        except BaseException:
            conn.disconnect()
            raise
        finally:
            self._pool.release(conn)
