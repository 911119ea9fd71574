"""``runs/redis_lua.py``'s short script calls against the test Redis: the answers redis-py's own
``Script`` gives, a lost script cache, a connection the server closed, a call that timed out,
many threads on a small pool, and a forked process."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from celery_durable_beat.runs.redis_lua import LuaScript, pack

pytestmark = pytest.mark.integration

ECHO = "return {KEYS[1], ARGV[1], ARGV[2], #KEYS, #ARGV}"
SLOW = """
local start = redis.call('TIME')
repeat
  local now = redis.call('TIME')
until (now[1] - start[1]) * 1000000 + (now[2] - start[2]) >= tonumber(ARGV[1])
return ARGV[2]
"""
"""Answers ARGV[2] after ARGV[1] µs (Redis's own clock)."""


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    found = redis.Redis.from_url(redis_url, client_name=f"lua-test-{uuid.uuid4().hex[:8]}")
    yield found
    found.close()


def test_pack_is_a_resp_array_of_bulk_strings() -> None:
    expected = b"*4\r\n$3\r\nGET\r\n$1\r\nk\r\n$2\r\n12\r\n$2\r\n\xc3\xa9\r\n"
    assert pack(b"GET", "k", 12, "é") == expected
    with pytest.raises(TypeError, match="not a bool"):
        pack(b"GET", True)


def test_answers_as_redis_pys_script(client: redis.Redis) -> None:
    script = LuaScript(client, ECHO)
    theirs = client.register_script(ECHO)
    keys = ["durable_beat:run:x"]
    args: list[str | int] = ["owner:1|é", 60_000]
    assert script(keys=keys, args=args) == theirs(keys=keys, args=args)
    assert script(keys, args) == [b"durable_beat:run:x", b"owner:1|\xc3\xa9", b"60000", 1, 2]
    assert LuaScript(client, "return false")([], []) is None


def test_a_lost_script_cache_is_filled_again(client: redis.Redis) -> None:
    script = LuaScript(client, ECHO)
    assert script(["k"], ["a", "b"])[0] == b"k"
    client.script_flush()
    assert client.script_exists(script.sha.decode()) == [False]
    assert script(["k2"], ["a", "b"])[0] == b"k2"
    assert client.script_exists(script.sha.decode()) == [True]


def test_a_connection_the_server_closed_is_replaced_before_use(
    client: redis.Redis, redis_url: str
) -> None:
    script = LuaScript(client, ECHO)
    assert script(["k"], ["a", "b"])[0] == b"k"
    name = client.connection_pool.connection_kwargs["client_name"]
    asker = redis.Redis.from_url(redis_url)
    try:
        held = [c["id"] for c in asker.client_list() if c.get("name") == name]
        assert len(held) == 1
        asker.client_kill_filter(_id=held[0])
        assert script(["k"], ["a", "b"])[0] == b"k"  # no error: a new connection
        now = [c["id"] for c in asker.client_list() if c.get("name") == name]
        assert len(now) == 1 and now != held
    finally:
        asker.close()


class KeptOnError(redis.Connection):
    """A connection that stays open when a read fails, as a Sentinel client's does."""

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("disconnect_on_error", False)
        return super().read_response(*args, **kwargs)


def test_a_call_that_timed_out_leaves_no_reply_for_the_next(redis_url: str) -> None:
    """The late reply of a call that timed out must never be read as the next call's answer,
    even on a connection that redis-py leaves open after a failed read."""
    client = redis.Redis.from_url(redis_url, socket_timeout=0.2, connection_class=KeptOnError)
    script = LuaScript(client, SLOW)
    try:
        with pytest.raises(redis.TimeoutError):
            script([], [400_000, "first"])
        answers = []
        deadline = time.monotonic() + 10
        while not answers and time.monotonic() < deadline:
            with contextlib.suppress(redis.TimeoutError):  # Redis still runs the first
                answers.append(script([], [0, "second"]))
        assert answers == [b"second"]
    finally:
        client.close()


def test_each_call_gives_its_connection_back(redis_url: str) -> None:
    """Twelve threads, one after another, on a pool of one connection: none runs out (a
    connection kept by a thread would refuse every later thread's call)."""
    client = redis.Redis.from_url(redis_url, max_connections=1)
    script = LuaScript(client, ECHO)
    answers: list[bytes] = []
    try:
        for i in range(12):
            thread = threading.Thread(
                target=lambda i=i: answers.append(script([f"k{i}"], [1, 2])[0])
            )
            thread.start()
            thread.join(timeout=10)
        assert answers == [f"k{i}".encode() for i in range(12)]
    finally:
        client.close()


def test_a_forked_process_makes_its_own_connection(client: redis.Redis) -> None:
    script = LuaScript(client, ECHO)
    assert script(["parent"], ["a", "b"])[0] == b"parent"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            ok = script(["child"], ["a", "b"])[0] == b"child"
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)
    os.close(read)
    assert script(["parent"], ["a", "b"])[0] == b"parent"  # the parent's is still its own
