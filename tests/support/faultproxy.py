"""A TCP proxy to put between a process and its server, and break on demand (issue #15).

``FaultProxy(host, port)`` listens on ``127.0.0.1`` on a free port, in a thread of its own with
its own asyncio loop, and forwards every connection to ``host:port``. ``url(original)`` rewrites
a server URL (PostgreSQL, Redis, AMQP) to go through the proxy. The test switches it at will:

- ``pass_()``: forward everything (the start; ``pass`` is a keyword, hence the underscore);
- ``drop()``: reset every open connection (both sides), and accept-then-reset new ones, until
  ``pass_()``: a server that went away, or a firewall that rejects;
- ``hang()``: keep accepting, forward nothing; bytes read meanwhile are held, in order, and
  delivered when the direction passes again (a network partition that heals before TCP gives
  up, so the client's blocked call completes late, as it would);
- ``slow(seconds)``: deliver each chunk ``seconds`` after it arrived (latency, not throughput).

``hang`` and ``slow`` take a direction: ``upstream`` (client -> server), ``downstream``
(server -> client) or ``both`` (the default); ``pass_`` too. ``drop`` is of whole connections.
Every switch returns once the loop has applied it: after ``drop()`` every open connection is
closed. A side's end (EOF) is forwarded like data, as a half-close, so a hung direction holds
it too; the connection closes when both sides have ended.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit, urlunsplit

Direction = Literal["upstream", "downstream", "both"]
T = TypeVar("T")

CHUNK = 65536


@dataclass
class _Way:
    """How one direction behaves now; ``flowing`` is set when it is not hung."""

    delay: float = 0.0
    flowing: asyncio.Event = field(default_factory=asyncio.Event)
    forwarded: int = 0

    def __post_init__(self) -> None:
        self.flowing.set()


class _Connection:
    """One client connection and its server connection: two pipes, each a reader and a writer
    around a queue of ``(arrived, chunk)``; ``b""`` is the end of that side."""

    def __init__(
        self, proxy: FaultProxy, client: tuple[asyncio.StreamReader, asyncio.StreamWriter]
    ) -> None:
        self.proxy = proxy
        self.client = client
        self.server: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self.tasks: list[asyncio.Task[None]] = []

    async def run(self) -> None:
        try:
            self.server = await asyncio.open_connection(
                self.proxy.target_host, self.proxy.target_port
            )
        except OSError:
            self.abort()
            return
        for way, source, sink in (
            ("upstream", self.client[0], self.server[1]),
            ("downstream", self.server[0], self.client[1]),
        ):
            queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
            self.tasks.append(asyncio.create_task(self._read(source, queue)))
            self.tasks.append(asyncio.create_task(self._write(way, queue, sink)))
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.abort()

    async def _read(self, source: asyncio.StreamReader, queue: asyncio.Queue[Any]) -> None:
        while True:
            try:
                chunk = await source.read(CHUNK)
            except OSError:
                chunk = b""
            await queue.put((time.monotonic(), chunk))
            if not chunk:
                return

    async def _write(
        self, name: str, queue: asyncio.Queue[tuple[float, bytes]], sink: asyncio.StreamWriter
    ) -> None:
        way = self.proxy.ways[name]
        while True:
            arrived, chunk = await queue.get()
            while True:  # the mode may change while the chunk waits: check again after a delay
                await way.flowing.wait()
                due = arrived + way.delay - time.monotonic()
                if due <= 0:
                    break
                await asyncio.sleep(due)
            if not chunk:  # that side ended: pass the half-close on, once its bytes are through
                try:
                    if sink.can_write_eof():
                        sink.write_eof()
                except OSError:
                    self.abort()
                return
            try:
                sink.write(chunk)
                await sink.drain()
            except OSError:
                self.abort()
                return
            way.forwarded += len(chunk)

    def abort(self) -> None:
        """Reset both sides now (what a dropped connection looks like to each)."""
        for pair in (self.client, self.server):
            if pair is not None:
                pair[1].transport.abort()
        current = asyncio.current_task()
        for task in self.tasks:
            if task is not current:
                task.cancel()
        self.proxy.connections.discard(self)


class FaultProxy:
    """A proxy to ``target_host:target_port`` on ``127.0.0.1:<free port>``; see the module."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.connections: set[_Connection] = set()
        self.accepted = 0
        self.dropping = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.ways: dict[str, _Way] = self._call(self._make_ways())
        self._server = self._call(asyncio.start_server(self._accept, "127.0.0.1", 0))
        self.port: int = self._server.sockets[0].getsockname()[1]

    @classmethod
    def for_url(cls, url: str) -> FaultProxy:
        """A proxy to the server ``url`` names."""
        parts = urlsplit(url)
        assert parts.hostname and parts.port, f"{url} names no host and port"
        return cls(parts.hostname, parts.port)

    def url(self, original: str) -> str:
        """``original`` with its host and port replaced by the proxy's (credentials kept)."""
        parts = urlsplit(original)
        userinfo, _, _ = parts.netloc.rpartition("@")
        netloc = f"{userinfo}@" if userinfo else ""
        return urlunsplit(parts._replace(netloc=f"{netloc}127.0.0.1:{self.port}"))

    # -- modes ----------------------------------------------------------------------------------
    def pass_(self, direction: Direction = "both") -> None:
        """Forward again (in that direction): held bytes go through, new connections are kept."""

        def apply() -> None:
            self.dropping = False
            for way in self._ways(direction):
                way.delay = 0.0
                way.flowing.set()

        self._apply(apply)

    def drop(self) -> None:
        """Reset every open connection; new ones are reset as soon as accepted, until
        ``pass_()``."""

        def apply() -> None:
            self.dropping = True
            for conn in list(self.connections):
                conn.abort()

        self._apply(apply)

    def hang(self, direction: Direction = "both") -> None:
        """Forward nothing in that direction; hold what arrives until it passes again."""
        self._apply(lambda: [way.flowing.clear() for way in self._ways(direction)])

    def slow(self, seconds: float, direction: Direction = "both") -> None:
        """Deliver each chunk ``seconds`` after it arrived, in that direction."""

        def apply() -> None:
            for way in self._ways(direction):
                way.delay = seconds

        self._apply(apply)

    def forwarded(self, direction: Literal["upstream", "downstream"]) -> int:
        """Bytes delivered so far in that direction."""
        return self.ways[direction].forwarded

    def open_connections(self) -> int:
        return self._call(self._count())

    def close(self) -> None:
        """Close the listener and every connection, stop the loop and its thread."""
        if not self._loop.is_running():
            return
        self.drop()
        self._server.close()
        self._call(self._server.wait_closed())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    # -- the loop's side --------------------------------------------------------------------------
    async def _make_ways(self) -> dict[str, _Way]:
        return {"upstream": _Way(), "downstream": _Way()}  # their Events belong to this loop

    async def _count(self) -> int:
        return len(self.connections)

    def _ways(self, direction: Direction) -> list[_Way]:
        if direction == "both":
            return list(self.ways.values())
        return [self.ways[direction]]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.dropping:
            writer.transport.abort()
            return
        conn = _Connection(self, (reader, writer))
        self.connections.add(conn)
        await conn.run()

    def _apply(self, change: Any) -> None:
        async def run() -> None:
            change()

        self._call(run())

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)
