"""Real processes for the tests: one celery process, throwaway servers, deadline polls.

``tests/support/rig.py`` builds the beat and worker processes of the tests on these."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]


def wait_until(check: Callable[[], T], timeout: float, what: str, interval: float = 0.1) -> T:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


PORTS_FROM = 20_000
"""Test servers listen on ports from here to the kernel's ephemeral range."""


def _ephemeral_start() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A free port *below* the kernel's ephemeral range. A test server that is stopped and
    started again (a restart scenario) must get its port back; one from the ephemeral range can
    meanwhile become the local end of any client's outgoing connection (seen: RabbitMQ failing to
    restart with ``eaddrinuse`` while a parallel test held connections)."""
    rng = random.SystemRandom()
    top = max(PORTS_FROM + 1000, _ephemeral_start())
    for _ in range(500):
        port = rng.randrange(PORTS_FROM, top)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free port in {PORTS_FROM}-{top} after 500 tries")


class CeleryProcess:
    """``python -m celery -A <module> ...`` with its output in a file we can read while it runs,
    and its structured log records (``ACTIONS_FILE``, written by ``tests/support/procapp.py``)."""

    def __init__(
        self, workdir: Path, module: str, args: list[str], env: Mapping[str, str], name: str
    ) -> None:
        self.name = name
        self.log_path = workdir / f"{name}.log"
        self.actions_path = workdir / f"{name}.actions.jsonl"
        self._log = self.log_path.open("w")
        full_env = {
            **os.environ,
            **env,
            "ACTIONS_FILE": str(self.actions_path),
            "PYTHONPATH": f"{workdir}{os.pathsep}{REPO}",
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", module, *args],
            cwd=workdir,
            env=full_env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, text: str, timeout: float) -> str:
        """Until ``text`` is in the output (a deadline poll); the output."""
        return wait_until(
            lambda: text in (out := self.output()) and out, timeout, f"{text!r} in {self.name}"
        )

    def actions(self, action: str | None = None) -> list[dict[str, Any]]:
        """The log records with an ``action`` key (that one only, if named), oldest first."""
        rows = read_jsonl(self.actions_path)
        return [r for r in rows if action is None or r["action"] == action]

    def wait_action(self, action: str, timeout: float) -> list[dict[str, Any]]:
        """Until the process has logged ``action`` (a deadline poll); its records of it."""
        return wait_until(lambda: self.actions(action), timeout, f"{action} in {self.name}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_exit(self, timeout: float) -> int | None:
        """The exit code once the process ends by itself, or None when it still runs at the
        deadline."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def tail(self, chars: int = 3000) -> str:
        """The end of the output, for assertion messages."""
        return f"{self.log_path.name}:\n{self.output()[-chars:]}"

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def stop(self, timeout: float = 20.0) -> int:
        self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return -9

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def close(self) -> None:
        self.kill()
        self._log.close()


class ThrowawayRedis:
    """A redis-server of our own on a free port, to stop and start at will."""

    persistence: tuple[str, ...] = ("--appendonly", "no")

    def __init__(self, *extra: str) -> None:
        """``extra`` options go to ``redis-server`` after ours (``--replicaof``, TLS, …)."""
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="tredis-")
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.extra = extra

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed (scripts/services.py installs it)"
        self.proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                *self.persistence,
                "--dir",
                self.dir,
                *self.extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(self._answers, 10, f"redis on port {self.port}")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of ``path`` so far; none when the file does not exist yet."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
