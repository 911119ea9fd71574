"""The chaos tests' fault proxy (``tests/support/faultproxy.py``) against a tiny echo server:
each mode does what it says, per direction, and ``pass_()`` heals every one."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest
import redis

from tests.support.faultproxy import FaultProxy
from tests.support.procs import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    proxy = FaultProxy("127.0.0.1", server.server_address[1])
    yield proxy
    proxy.close()
    server.shutdown()
    server.server_close()


def _client(proxy: FaultProxy, timeout: float = 2.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=timeout)


def _echo(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    got = b""
    while len(got) < len(data):
        chunk = sock.recv(4096)
        if not chunk:
            break
        got += chunk
    return got


def _gone(sock: socket.socket) -> bool:
    """Whether the connection was reset or ended (either is what a drop looks like)."""
    try:
        sock.sendall(b"?")
        return sock.recv(1) == b""
    except OSError:
        return True


def test_pass_forwards_both_ways(proxy: FaultProxy) -> None:
    with _client(proxy) as sock:
        assert _echo(sock, b"hello") == b"hello"
    wait_until(lambda: proxy.forwarded("downstream") == 5, 2, "the count of the echo")
    assert proxy.forwarded("upstream") == 5


def test_drop_resets_open_connections_and_refuses_new_ones_until_pass(proxy: FaultProxy) -> None:
    sock = _client(proxy)
    assert _echo(sock, b"x") == b"x"
    proxy.drop()
    assert proxy.open_connections() == 0
    assert _gone(sock)
    sock.close()
    with _client(proxy) as late:
        assert _gone(late)
    proxy.pass_()
    with _client(proxy) as sock:
        assert _echo(sock, b"back") == b"back"


@pytest.mark.parametrize("direction", ["upstream", "downstream", "both"])
def test_hang_holds_bytes_in_order_until_pass(proxy: FaultProxy, direction: str) -> None:
    with _client(proxy, timeout=0.2) as sock:
        assert _echo(sock, b"a") == b"a"
        proxy.hang(direction)  # type: ignore[arg-type]
        sock.sendall(b"bc")
        with pytest.raises(socket.timeout):
            sock.recv(10)
        with _client(proxy, timeout=0.2) as other:  # still accepting, still forwarding nothing
            other.sendall(b"q")
            with pytest.raises(socket.timeout):
                other.recv(1)
        sock.sendall(b"d")
        proxy.pass_()
        sock.settimeout(2)
        got = b""
        while len(got) < 3:
            got += sock.recv(10)
        assert got == b"bcd"


def test_hang_holds_the_servers_close_too(proxy: FaultProxy) -> None:
    with _client(proxy, timeout=0.2) as sock:
        assert _echo(sock, b"a") == b"a"
        proxy.hang("downstream")
        sock.shutdown(socket.SHUT_WR)  # the echo server sees EOF and closes its side
        with pytest.raises(socket.timeout):
            sock.recv(1)
        proxy.pass_("downstream")
        sock.settimeout(2)
        assert sock.recv(1) == b""


@pytest.mark.parametrize("direction", ["upstream", "downstream"])
def test_slow_adds_latency_in_one_direction(proxy: FaultProxy, direction: str) -> None:
    with _client(proxy) as sock:
        assert _echo(sock, b"warm") == b"warm"
        proxy.slow(0.4, direction)  # type: ignore[arg-type]
        started = time.monotonic()
        assert _echo(sock, b"late") == b"late"
        took = time.monotonic() - started
        assert 0.35 < took < 1.5, took
        proxy.pass_()
        started = time.monotonic()
        assert _echo(sock, b"fast") == b"fast"
        assert time.monotonic() - started < 0.3


def test_url_rewrites_host_and_port_and_keeps_the_rest() -> None:
    proxy = FaultProxy("127.0.0.1", 1)
    try:
        port = proxy.port
        assert proxy.url("postgresql+psycopg://postgres@127.0.0.1:5432/db?x=1") == (
            f"postgresql+psycopg://postgres@127.0.0.1:{port}/db?x=1"
        )
        assert proxy.url("amqp://guest:guest@localhost:5672//") == (
            f"amqp://guest:guest@127.0.0.1:{port}//"
        )
        assert proxy.url("redis://127.0.0.1:6379/13") == f"redis://127.0.0.1:{port}/13"
    finally:
        proxy.close()


def test_a_real_redis_client_through_the_proxy_times_out_on_hang_and_recovers() -> None:
    from tests.support.procs import ThrowawayRedis

    server = ThrowawayRedis()
    server.start()
    proxy = FaultProxy.for_url(server.url)
    client = redis.Redis.from_url(proxy.url(server.url), socket_timeout=0.5)
    try:
        assert client.ping()
        proxy.hang()
        with pytest.raises(redis.TimeoutError):
            client.ping()
        proxy.drop()
        with pytest.raises(redis.ConnectionError):
            client.ping()
        proxy.pass_()
        wait_until(lambda: _pings(client), 5, "redis through the healed proxy")
    finally:
        client.close()
        proxy.close()
        server.close()


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
