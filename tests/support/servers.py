"""Servers of the test's own, to stop and restart mid-run: a PostgreSQL cluster and a Redis with
an append-only file (a broker that keeps its queues over a restart, as production ones do)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.support.procs import ThrowawayRedis, free_port


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
