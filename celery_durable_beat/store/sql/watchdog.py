"""A client-side deadline on waits for a server: what bounds a call to a frozen one.

Why a thread of our own: a PostgreSQL server that is frozen (SIGSTOP, a paused VM, a hung host,
a stalled network path) keeps its kernel answering. TCP is ACKed and keepalives are answered, so
libpq's ``keepalives`` and ``tcp_user_timeout`` never fire, and the server's ``statement_timeout``
is enforced by the very process that is frozen. psycopg 3 has no per-query client timeout (3.3
has an internal one, ``Connection.wait(timeout=)`` raising the private ``_WaitTimeout``, which
3.1 and 3.2, also supported here, lack). A query to such a server waits for as long as the freeze
lasts, and beat's round with it, without a log line.

How: a connection that wants a bound (``Guarded``) is added to the process's watchdog once, when
it is made. Before each wait for its server it writes the instant the wait must end by
(``deadline``), and clears it when the wait returns: two attribute writes, no lock, no
allocation, nothing that wakes a thread, so an idle round does not get slower
(``bench/bench_call_bound.py``). One daemon thread looks at the guarded connections every
``tick`` seconds while there are any, and ``interrupt()``s each whose wait is overdue; for a
socket that means ``shutdown(SHUT_RDWR)`` (``shut_down``), so the blocked read returns an end of
file at once, the driver reports the connection lost and raises, and the store reports
``StoreUnavailable``. A wait therefore fails between its bound and its bound plus one tick.

A wait that ends just as its deadline passes may see its connection interrupted right after it
returned; that connection is then broken and replaced at its next use (the pool's ping), which
costs a reconnect, never a wrong answer.

The pure part lives here (deadlines, the thread); ``store/sql/bounded.py`` is psycopg's side.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

TICK_S = 1.0
"""How often the watchdog looks at the waits in progress, at most: a bound is kept to within it."""


class Guarded(Protocol):
    """What the watchdog needs of a connection it guards."""

    @property
    def deadline(self) -> float | None:
        """The monotonic instant the wait in progress must end by; None while not waiting."""

    def interrupt(self) -> None:
        """Make the wait in progress return at once (called from the watchdog's thread)."""


def shut_down(fd: int) -> None:
    """End the connection on ``fd`` for every holder of the socket: a blocked read returns an
    end of file, a blocked write fails. ``fd`` itself stays open: its owner closes it."""
    sock = socket.socket(fileno=fd)
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # not connected any more: nothing is waiting on it
        pass
    finally:
        sock.detach()  # ``fd`` is not ours to close


class Watchdog:
    """The guarded connections of this process and the thread that enforces their deadlines
    (module docstring). ``clock`` is a parameter for the tests."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        """Fresh state: at start, and in a forked child, which inherits the parent's lock
        (perhaps held) and connections but not its thread."""
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._guarded: weakref.WeakSet[Guarded] = weakref.WeakSet()
        self._tick = TICK_S
        self._thread: threading.Thread | None = None

    def add(self, guarded: Guarded, bound_s: float) -> None:
        """Guard ``guarded``, whose waits may last ``bound_s`` seconds; held weakly, so a
        connection dropped without ``discard`` is forgotten with it."""
        with self._lock:
            self._guarded.add(guarded)
            self._tick = min(self._tick, max(0.05, bound_s / 4))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="durable-beat-watchdog", daemon=True
                )
                self._thread.start()
            else:
                self._changed.notify()

    def discard(self, guarded: Guarded) -> None:
        """Stop guarding ``guarded`` (it is closed)."""
        with self._lock:
            self._guarded.discard(guarded)

    def guarded(self) -> int:
        """How many connections are guarded (for the tests)."""
        with self._lock:
            return len(self._guarded)

    def _run(self) -> None:
        with self._lock:
            while True:
                # Idle (nothing guarded): wait for ``add``; else look again in one tick.
                self._changed.wait(self._tick if self._guarded else None)
                self._expire(self.clock())

    def _expire(self, now: float) -> None:
        """Interrupt every overdue wait (the lock is held, so none is discarded meanwhile)."""
        for guarded in list(self._guarded):
            deadline = guarded.deadline
            if deadline is not None and deadline <= now:
                guarded.interrupt()


class _ThreadState(threading.local):
    """Per thread: inside ``unbounded()``? A class default, since a failed lookup on a
    ``threading.local`` (a new thread's) costs an exception: ten times the lookup itself."""

    off = False


_thread_state = _ThreadState()


@contextmanager
def unbounded() -> Iterator[None]:
    """No deadline for this thread's waits inside the block: a migration's DDL may rightly run
    for minutes (an index built on a large audit table), and nothing waits on it but the
    operator who started it."""
    before = deadlines_off()
    _thread_state.off = True
    try:
        yield
    finally:
        _thread_state.off = before


def deadlines_off() -> bool:
    """Whether this thread is inside ``unbounded()``."""
    return _thread_state.off


WATCHDOG = Watchdog()
"""This process's watchdog: one thread, started by the first connection it guards."""
