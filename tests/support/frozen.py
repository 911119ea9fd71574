"""Freezing a server of the test's own: SIGSTOP of every process it runs, SIGCONT afterwards.

A stopped server is what a hung host or a stalled network path looks like to a client: its
kernel still accepts connections, ACKs what is sent and answers keepalives, but nothing is ever
read or answered. Only servers of the test's own (``ThrowawayPostgres``, ``ThrowawayRedis``,
``ThrowawayRabbit``) are frozen here, never the machine's shared ones.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from tests.support.procs import ThrowawayRedis
from tests.support.servers import ThrowawayPostgres, ThrowawayRabbit


def _children() -> dict[int, list[int]]:
    """Every process's children, by parent pid (from /proc)."""
    found: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        found.setdefault(parent, []).append(int(entry.name))
    return found


def tree(root: int) -> list[int]:
    """``root`` and its descendants, parents before children."""
    children = _children()
    order, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        order.append(pid)
        todo += children.get(pid, [])
    return order


Server = ThrowawayPostgres | ThrowawayRedis | ThrowawayRabbit


def server_root(server: Server) -> int:
    """The parent process of a test server: the postmaster, the redis-server, or the
    ``rabbitmq-server`` that runs the Erlang VM."""
    if isinstance(server, ThrowawayPostgres):
        return int((server.data / "postmaster.pid").read_text().split()[0])
    assert server.proc is not None, "the server is not running"
    return server.proc.pid


@contextmanager
def frozen(server: Server) -> Iterator[float]:
    """The server stopped for the block and continued when it ends, whatever happens; yields
    the monotonic instant it froze. The parent is stopped first and its children listed after,
    so no process it forks is missed."""
    root = server_root(server)
    stopped: list[int] = []
    try:
        os.kill(root, signal.SIGSTOP)
        stopped.append(root)
        for pid in tree(root)[1:]:
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        yield time.monotonic()
    finally:
        for pid in reversed(stopped):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
