"""Servers of the test's own, to stop and restart mid-run: a PostgreSQL cluster, a Redis with
an append-only file (a broker that keeps its queues over a restart, as production ones do) and a
RabbitMQ node. The machine's shared servers are never stopped: other test runs use them."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.support.procs import ThrowawayRedis, free_port, wait_until


def _pg_bindir() -> Path:
    """Where initdb and pg_ctl live (Debian keeps them off PATH, per major version)."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    assert versions, "PostgreSQL server binaries (initdb, pg_ctl) are not installed"
    return Path(versions[-1]).parent


class ThrowawayPostgres:
    """A PostgreSQL cluster in a temporary folder on a free port, trust auth, fsync off.

    PostgreSQL refuses to run as root, so as root the cluster belongs to the ``postgres`` user
    and every server command runs through ``runuser``.
    """

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="tpg-"))
        self.data = self.dir / "data"
        self.bindir = _pg_bindir()
        self._as: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
            self._as = ["runuser", "-u", "postgres", "--"]
        self.admin_url = self.url("postgres")

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run(
            [*self._as, str(self.bindir / tool), *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=120,
        )

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        log = str(self.dir / "server.log")
        self._run(
            "pg_ctl", "-D", str(self.data), "-o", options, "-l", log, "-w", "-t", "60", "start"
        )

    def stop(self) -> None:
        """A fast shutdown: every session is cut, as in a failover or a restart for an upgrade."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop")

    def create_database(self, name: str) -> str:
        import psycopg

        dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')  # a name the test generated
        return self.url(name)

    def close(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class PersistentRedis(ThrowawayRedis):
    """A throwaway redis-server that fsyncs an append-only file, so a restart keeps its data."""

    persistence = ("--appendonly", "yes", "--appendfsync", "always")


def _rabbit_bindir() -> Path:
    """Where rabbitmq-server and rabbitmqctl really live: Debian's /usr/sbin ones are wrappers
    that switch to the ``rabbitmq`` user, whose home holds the shared node's Erlang cookie."""
    for candidate in ("/usr/lib/rabbitmq/bin", *sorted(glob.glob("/usr/lib/rabbitmq/lib/*/sbin"))):
        if (Path(candidate) / "rabbitmq-server").exists():
            return Path(candidate)
    found = shutil.which("rabbitmq-server")
    assert found, "rabbitmq-server is not installed (apt-get install rabbitmq-server)"
    return Path(found).parent


class ThrowawayRabbit:
    """A RabbitMQ node of the test's own: its own node name, AMQP and distribution ports, data,
    logs and Erlang cookie (``HOME``) in a temporary folder, so stopping it touches no other
    node. Queues declared durable and messages published persistent (Celery's defaults) survive
    ``stop()`` + ``start()``, as on a production broker restarted for an upgrade."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="trabbit-"))
        self.node = f"chaos-{self.port}@localhost"
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}//"
        self.bindir = _rabbit_bindir()
        self.proc: subprocess.Popen[bytes] | None = None
        (self.dir / "enabled_plugins").write_text("[].\n")
        (self.dir / "rabbitmq-env.conf").write_text("")
        self.env = {
            **os.environ,
            "HOME": str(self.dir),
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(free_port()),
            "RABBITMQ_MNESIA_BASE": str(self.dir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.dir / "log"),
            "RABBITMQ_PID_FILE": str(self.dir / "node.pid"),
            "RABBITMQ_CONFIG_FILE": str(self.dir / "rabbitmq"),  # absent: the defaults
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.dir / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.dir / "enabled_plugins"),
            "RABBITMQ_CONF_ENV_FILE": str(self.dir / "rabbitmq-env.conf"),
        }

    def start(self, timeout: float = 90) -> None:
        """Boot the node in the foreground of a child process; return once AMQP answers."""
        with (self.dir / "server.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [str(self.bindir / "rabbitmq-server")],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_until(self._answers, timeout, f"RabbitMQ node {self.node}", interval=0.3)

    def _answers(self) -> bool:
        from kombu import Connection
        from kombu.exceptions import OperationalError

        assert self.proc is not None and self.proc.poll() is None, self.log_tail()
        try:
            with Connection(self.url, connect_timeout=1) as conn:
                conn.ensure_connection(max_retries=1)
        except (OperationalError, OSError):
            return False
        return True

    def stop(self) -> None:
        """``rabbitmqctl stop``: the node closes every connection and halts, as in a restart."""
        if self.proc is None:
            return
        subprocess.run(
            [str(self.bindir / "rabbitmqctl"), "-n", self.node, "stop"],
            env=self.env,
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
        )
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait(timeout=10)
        self.proc = None

    def log_tail(self, chars: int = 2000) -> str:
        path = self.dir / "server.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
