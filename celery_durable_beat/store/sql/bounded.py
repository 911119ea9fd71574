"""psycopg connections whose every wait for the server has a deadline (``watchdog.py`` says why).

psycopg funnels every exchange with the server through ``Connection.wait``: each ``execute``
(its results read whole), fetch, ``commit`` and ``rollback``, and so SQLAlchemy's pool ping.
``BoundedConnection`` sets its deadline around each such wait; the watchdog shuts down the
socket of one that outlives it. The connection is then broken (``Connection.broken``, so
SQLAlchemy's ``is_disconnect`` says yes and the pool discards it) and the error says what
happened, not libpq's "server closed the connection unexpectedly". Connecting is not such a
wait: libpq's ``connect_timeout``, which psycopg enforces on the client, bounds it.

The socket is shut down through a duplicate of its descriptor that the connection holds for its
whole life and closes only once the watchdog has let go of it (``close``), so the descriptor the
watchdog shuts down is always this connection's, never one the system reused meanwhile.

Imported only for a PostgreSQL URL with the psycopg driver: psycopg is the ``postgres`` extra's,
and a SQLite store must not need it.
"""

from __future__ import annotations

import os
import time
import weakref
from typing import Any

import psycopg

from celery_durable_beat.store.sql.watchdog import WATCHDOG, deadlines_off, shut_down

_wait = psycopg.Connection.wait
"""psycopg's own, called directly: ``super()`` costs a third of what this adds to a wait."""


class BoundedConnection(psycopg.Connection[Any]):
    """A psycopg connection whose waits last about ``bound_s`` seconds at most (module
    docstring); ``guard`` arms it, ``connect`` below does both."""

    bound_s: float | None = None
    deadline: float | None = None
    fired = False
    _spare_fd = -1
    _release: weakref.finalize[Any, Any]

    def guard(self, bound_s: float) -> None:
        """Bound this connection's waits by ``bound_s`` seconds from now on."""
        self.bound_s = bound_s
        self._spare_fd = fd = os.dup(self.pgconn.socket)
        self._release = weakref.finalize(self, os.close, fd)  # also when dropped unclosed
        WATCHDOG.add(self, bound_s)

    def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
        """``Connection.wait`` with a deadline; its arguments are passed on untouched (their
        names changed between psycopg 3.1 and 3.3)."""
        bound = self.bound_s
        if bound is None or deadlines_off():
            return _wait(self, gen, *args, **kwargs)
        self.deadline = time.monotonic() + bound
        try:
            return _wait(self, gen, *args, **kwargs)
        except psycopg.OperationalError as exc:
            if self.fired:
                raise psycopg.OperationalError(
                    f"the server did not answer within {bound:g} s "
                    "(durable_beat_call_timeout in the store URL); the connection is closed"
                ) from exc
            raise
        finally:
            self.deadline = None

    def interrupt(self) -> None:
        """The wait in progress is overdue (the watchdog's thread): shut the socket down."""
        self.fired = True
        shut_down(self._spare_fd)

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self._spare_fd >= 0:
                WATCHDOG.discard(self)  # returns once no interrupt of this one is under way
                self._release()


def connect(bound_s: float, *args: Any, **kwargs: Any) -> psycopg.Connection[Any]:
    """``psycopg.connect(*args, **kwargs)``, its waits bounded by ``bound_s`` seconds."""
    conn = BoundedConnection.connect(*args, **kwargs)
    try:
        conn.guard(bound_s)
    except BaseException:
        conn.close()
        raise
    return conn
