"""Servers of the test's own, to stop and restart mid-run: a PostgreSQL cluster (and a streaming
replica of it, to promote), a Redis with an append-only file (a broker that keeps its queues over
a restart, as production ones do), a Redis with TLS, a Redis primary with a replica watched by
three sentinels (SPEC §7's production topologies) and a RabbitMQ node. The machine's shared
servers are never stopped: other test runs use them."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tests.support.procs import ThrowawayRedis, free_port, wait_until


def _pg_bindir() -> Path:
    """Where initdb and pg_ctl live (Debian keeps them off PATH, per major version)."""
    found = shutil.which("pg_ctl")
    if found:  # a link on PATH leads to the folder that also has pg_basebackup
        return Path(found).resolve().parent
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

    def replica(self) -> ThrowawayPostgres:
        """A streaming replica of this running cluster (``pg_basebackup -R``) on a port of its
        own, not started yet."""
        standby = ThrowawayPostgres()
        standby._run(
            "pg_basebackup",
            *("-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres"),
            *("-D", str(standby.data), "-R", "-X", "stream", "-c", "fast", "--no-sync"),
        )
        return standby

    def promote(self) -> None:
        """A standby becomes a primary (what a failover manager does after the primary died)."""
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "promote")

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


def multi_host_url(database: str, *servers: ThrowawayPostgres) -> str:
    """The store URL naming every server, libpq's ``target_session_attrs=read-write`` picking
    the primary among them, in SQLAlchemy's form (hosts in the query)."""
    hosts = "&".join(f"host=127.0.0.1:{server.port}" for server in servers)
    return f"postgresql+psycopg://postgres@/{database}?{hosts}&target_session_attrs=read-write"


class PersistentRedis(ThrowawayRedis):
    """A throwaway redis-server that fsyncs an append-only file, so a restart keeps its data."""

    persistence = ("--appendonly", "yes", "--appendfsync", "always")


def make_certificates(folder: Path) -> dict[str, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it, made with ``openssl``."""
    files = {n: folder / f"{n}" for n in ("ca.key", "ca.crt", "server.key", "server.csr")}
    files["server.crt"] = folder / "server.crt"
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    key = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    ca_key, ca_crt, csr = files["ca.key"], files["ca.crt"], files["server.csr"]
    commands = [
        ["req", "-x509", *key, "-keyout", ca_key, "-out", ca_crt, "-days", "1", "-subj", "/CN=ca"],
        ["req", *key, "-keyout", files["server.key"], "-out", csr, "-subj", "/CN=127.0.0.1"],
        [
            *("x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial"),
            *("-out", files["server.crt"], "-days", "1", "-extfile", folder / "san.ext"),
        ],
    ]
    for args in commands:
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)
    return files


class TlsRedis(ThrowawayRedis):
    """A redis-server that speaks TLS only, with a certificate of a CA made for the test; its
    ``url`` is the ``rediss://`` lease URL that verifies that certificate."""

    def __init__(self, folder: Path) -> None:
        self.files = make_certificates(folder)
        super().__init__(
            *("--port", "0", "--tls-port", "0"),  # the TLS port is set below, once known
            *("--tls-cert-file", str(self.files["server.crt"])),
            *("--tls-key-file", str(self.files["server.key"])),
            *("--tls-ca-cert-file", str(self.files["ca.crt"])),
            *("--tls-auth-clients", "no"),
        )
        self.extra = (*self.extra[:3], str(self.port), *self.extra[4:])
        ca = quote(str(self.files["ca.crt"]), safe="")
        self.url = f"rediss://127.0.0.1:{self.port}/0?ssl_cert_reqs=CERT_REQUIRED&ssl_ca_certs={ca}"

    def _answers(self) -> bool:
        context = ssl.create_default_context(cafile=str(self.files["ca.crt"]))
        try:
            with (
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as raw,
                context.wrap_socket(raw, server_hostname="127.0.0.1") as s,
            ):
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False


class Sentinel:
    """One ``redis-server sentinel.conf --sentinel`` watching ``master`` on ``primary_port``,
    quick to judge it down (1 s) and to fail over."""

    def __init__(self, master: str, primary_port: int, quorum: int) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="tsentinel-"))
        self.conf = self.dir / "sentinel.conf"  # a file of its own: sentinels rewrite it
        self.conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\n"
            f"sentinel monitor {master} 127.0.0.1 {primary_port} {quorum}\n"
            f"sentinel down-after-milliseconds {master} 1000\n"
            f"sentinel failover-timeout {master} 2000\n"
            f"sentinel parallel-syncs {master} 1\n"
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed (scripts/services.py installs it)"
        self.proc = subprocess.Popen(
            [binary, str(self.conf), "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


class SentinelRedis:
    """A Redis primary, one replica and three sentinels (quorum 2), all on free ports.

    ``url`` and ``options`` are the lease settings a Celery user would write for it;
    ``fail_over`` moves the master to the other server, by killing it or by ``SENTINEL
    FAILOVER``, and waits until the sentinels name the new one.
    """

    def __init__(self, master: str = "topo") -> None:
        self.master = master
        self.primary = ThrowawayRedis()
        self.replica = ThrowawayRedis("--replicaof", "127.0.0.1", str(self.primary.port))
        self.sentinels = [Sentinel(master, self.primary.port, 2) for _ in range(3)]
        self.url = ";".join(f"sentinel://127.0.0.1:{s.port}" for s in self.sentinels)
        self.options: dict[str, Any] = {"master_name": master}

    def start(self) -> None:
        self.primary.start()
        self.replica.start()
        wait_until(lambda: self._in_sync(self.replica), 20, "the replica to sync")
        for sentinel in self.sentinels:
            sentinel.start()
        wait_until(self._sentinels_see_the_replica, 30, "the sentinels to find the replica")

    def client(self, port: int) -> Any:
        import redis

        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)

    def _ask(self, sentinel: Sentinel, *command: str) -> Any:
        client = self.client(sentinel.port)
        try:
            return client.execute_command(*command)
        except OSError:
            return None
        finally:
            client.close()

    def _in_sync(self, server: ThrowawayRedis) -> bool:
        """Whether ``server`` is a replica whose link to its master is up."""
        client = self.client(server.port)
        try:
            return bool(client.info("replication").get("master_link_status") == "up")
        except OSError:
            return False
        finally:
            client.close()

    def _sentinels_see_the_replica(self) -> bool:
        import redis

        try:
            return all(self._ask(s, "SENTINEL", "REPLICAS", self.master) for s in self.sentinels)
        except redis.RedisError:
            return False

    def master_port(self) -> int | None:
        """The master's port as the first sentinel that answers names it."""
        for sentinel in self.sentinels:
            answer = self._ask(sentinel, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master)
            if answer:
                return int(answer[1])
        return None

    def fail_over(self, *, kill: bool, timeout: float = 40) -> ThrowawayRedis:
        """Fail the master over to the other server and wait until the sentinels name it and it
        says it is master; the new master. ``kill``: the master dies (no shutdown, no last
        save); else ``SENTINEL FAILOVER``, which demotes the master to a replica, so clients
        still connected to it get ``READONLY`` errors rather than a closed socket."""
        current, other = self.primary, self.replica
        if self.master_port() != current.port:
            current, other = other, current
        if kill:
            assert current.proc is not None
            current.proc.kill()
            current.proc.wait(timeout=10)
            current.proc = None
        else:
            wait_until(lambda: self._in_sync(other), 20, "the replica to be in sync")
            self._ask(self.sentinels[0], "SENTINEL", "FAILOVER", self.master)
        wait_until(
            lambda: self.master_port() == other.port and self._is_master(other),
            timeout,
            f"the sentinels to promote the server on port {other.port}",
        )
        return other

    def _is_master(self, server: ThrowawayRedis) -> bool:
        client = self.client(server.port)
        try:
            return bool(client.info("replication").get("role") == "master")
        finally:
            client.close()

    def close(self) -> None:
        for sentinel in self.sentinels:
            sentinel.close()
        self.replica.close()
        self.primary.close()


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
