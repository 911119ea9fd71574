"""The console's sessions and its sign-in throttle, kept in the memory of the ``serve`` process.

A session cookie is ``<id>.<expiry>.<mac>``: a random id, its expiry (unix seconds) and an
HMAC-SHA256 of both under a key drawn when the process starts. It is opaque (the API token is
never in it) and signed (a forged or edited value is refused before any lookup); the session
table makes sign-out real: ``end`` forgets the id, so replaying the old cookie signs nobody in.
Each session has its own CSRF value, drawn at sign-in, so a new sign-in rotates it.

Memory, not the store, because ``serve`` is one process and its sessions are worth a sign-in:
a restart signs everyone out, which is also what rotating the key would do. Run several
``serve`` processes behind a balancer only with sticky sessions.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from celery_durable_beat.settings import Role

SESSION_TTL = 12 * 3600.0
"""How long a console session lasts (seconds): 12 h, a working day; then sign in again."""
MOST_SESSIONS = 10_000
"""Sessions kept at once; past it the oldest is dropped (its holder signs in again)."""


@dataclass(frozen=True)
class Session:
    """A signed-in browser: its role, the CSRF value its forms carry, when it ends, and the
    token's name (the actor its actions are recorded under)."""

    id: str
    role: Role
    csrf: str
    expires: float
    actor: str = ""


def same_text(expected: str, presented: str | None) -> bool:
    """Constant-time equality of two texts of any characters (``hmac.compare_digest`` refuses a
    ``str`` that is not ASCII, which made a tampered form value a 500)."""
    if presented is None:
        return False
    return hmac.compare_digest(expected.encode(), presented.encode("utf-8", "surrogatepass"))


class Sessions:
    """Signed-in sessions by id; ``clock`` is wall time in seconds (a parameter for tests)."""

    def __init__(
        self,
        ttl: float = SESSION_TTL,
        clock: Callable[[], float] = time.time,
        most: int = MOST_SESSIONS,
    ) -> None:
        self._key = secrets.token_bytes(32)
        self._ttl, self._clock, self._most = ttl, clock, most
        self._live: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def ttl(self) -> float:
        return self._ttl

    def start(self, role: Role, actor: str = "") -> tuple[Session, str]:
        """A new session and its cookie value; ``actor``: the signed-in token's name."""
        session = Session(
            secrets.token_urlsafe(24),
            role,
            secrets.token_urlsafe(24),
            self._clock() + self._ttl,
            actor or role.value,
        )
        with self._lock:
            self._live[session.id] = session
            while len(self._live) > self._most:
                self._live.popitem(last=False)
        return session, self._cookie(session)

    def find(self, cookie: str | None) -> Session | None:
        """The live session a cookie names; None when unsigned, edited, expired or ended."""
        if not cookie or cookie.count(".") != 2:
            return None
        sid, expiry, mac = cookie.split(".")
        if not same_text(self._mac(sid, expiry), mac):
            return None
        with self._lock:
            session = self._live.get(sid)
            if session is not None and session.expires <= self._clock():
                del self._live[sid]
                session = None
        return session

    def end(self, cookie: str | None) -> None:
        """Sign-out: the session is forgotten, so its cookie no longer signs anyone in."""
        session = self.find(cookie)
        if session is not None:
            with self._lock:
                self._live.pop(session.id, None)

    def _cookie(self, session: Session) -> str:
        expiry = str(int(session.expires))
        return f"{session.id}.{expiry}.{self._mac(session.id, expiry)}"

    def _mac(self, sid: str, expiry: str) -> str:
        message = f"{sid}.{expiry}".encode("utf-8", "surrogatepass")
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()


FREE_FAILURES = 5
"""Failed sign-ins from one address before it must wait."""
LONGEST_WAIT = 900.0
"""The wait after many failures stops doubling at 15 minutes."""
FORGET_AFTER = 3600.0
"""An address with no failure for an hour starts afresh."""
MOST_ADDRESSES = 10_000


class SignInThrottle:
    """Slows password guessing per client address without holding any thread.

    The first ``FREE_FAILURES`` failures cost nothing; each later one makes the address wait
    1 s, 2 s, 4 s, … (at most ``LONGEST_WAIT``) before its next attempt, and an attempt during
    the wait is answered 429 with ``Retry-After`` at once, never slept on, so one client cannot
    stall the others. A success clears the address. ``clock`` is monotonic seconds.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self._lock = threading.Lock()

    def wait(self, address: str) -> float:
        """Seconds ``address`` must still wait before trying again (0: it may try now)."""
        with self._lock:
            count, last = self._failures.get(address, (0, 0.0))
        if count <= FREE_FAILURES:
            return 0.0
        doublings = min(count - FREE_FAILURES - 1, 10)  # 2**10 s > LONGEST_WAIT; no overflow
        due = last + min(2.0**doublings, LONGEST_WAIT)
        return max(0.0, due - self._clock())

    def failed(self, address: str) -> None:
        now = self._clock()
        with self._lock:
            count, last = self._failures.pop(address, (0, now))
            if now - last > FORGET_AFTER:
                count = 0
            self._failures[address] = (count + 1, now)
            while len(self._failures) > MOST_ADDRESSES:
                self._failures.popitem(last=False)

    def succeeded(self, address: str) -> None:
        with self._lock:
            self._failures.pop(address, None)
