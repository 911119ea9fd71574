"""Does SIGKILLing a plain Celery worker lose ``acks_late`` messages on Redis? (RabbitMQ control)

Why: a soak lost one periodic task message that no worker ever executed or received. The
workers were plain Celery workers (prefork, concurrency 2) on a Redis broker, the task
``acks_late=True``, killed with SIGKILL (whole process group) about every two minutes while
they had a backlog. The hypothesis is kombu's Redis ack emulation: ``BRPOP`` takes the
message off the queue list, and only afterwards, in a separate round trip, does
``QoS.append`` write it to the ``unacked`` hash and index. A SIGKILL between the two leaves
the message in neither place, so no ``visibility_timeout`` restore can bring it back,
``acks_late`` or not. In the installed kombu (5.7.0) the path is
``Channel._brpop_read`` (kombu/transport/redis.py, parses the BRPOP reply and calls
``connection._deliver``) -> ``Transport._deliver`` (kombu/transport/virtual/base.py) -> the
``_callback`` made in ``Channel.basic_consume`` (virtual/base.py), which calls
``QoS.append`` (redis.py: a ZADD + HSET pipeline) before handing the message to Celery.
RabbitMQ has no such window: the broker itself holds a delivered, unacked message and
requeues it when the consumer's connection dies.

What it does, with nothing from celery_durable_beat installed in the worker:

1. publishes ``--messages`` tasks (``bench/broker_kill_app.py``, one ``acks_late`` task that
   appends its task id to a file) to a fresh ``kloss-...`` queue, and tops the queue up by
   ``--top-up`` more before a worker start whenever fewer than half that many are queued, so
   every kill lands on a worker with a backlog (the trivial task runs at some 500/s);
2. ``--kills`` times: starts ``celery worker -P prefork -c 2`` (or ``--pool solo``) in its
   own process group, waits until it has executed something (so the kill lands while it
   consumes a backlog, not while it imports), sleeps a random 0.5-2 s (seeded RNG, seed
   printed) and SIGKILLs the whole group;
3. starts a last worker and lets it drain, past the visibility timeout: on Redis, unacked
   messages of a killed worker come back only through ``QoS.restore_visible``, which kombu
   calls when a consumer starts (``MultiChannelPoller.on_poll_init``) and on a timer
   (``maybe_restore_messages``, every ``unacked_restore_interval`` s, scanning on every
   ``unacked_restore_throttle``-th call; the app sets 2 s and 1). The drain stops when every
   id has run or when nothing new has run for 3x the visibility timeout;
4. counts the ids that never ran, and for each looks in what is left on the broker: the
   Redis queue lists (all priority lists) and unacked hash, or, on RabbitMQ, the messages
   still in the queue. It also reads the workers' INFO logs to tell "received by a worker
   and never run" (Celery logs ``received`` after ``QoS.append``) from "never received".

    .venv/bin/python bench/broker_kill_loss.py [--broker URL] [--pool prefork|solo]
        [--messages 20000] [--top-up 10000] [--kills 200] [--seed N] [--vt 10]

``--broker amqp://guest:guest@127.0.0.1:5672//`` runs the same against RabbitMQ.
``--redeliver S`` (Redis) runs it with the package: the messages are ticks recorded ``enqueued``
in a fresh PostgreSQL store, the workers run ``install(app)`` and the driver runs the leader's
redelivery sweep (``bench/kill_loss_redeliver.py``); ``lost`` then counts ticks never run
although redelivery was on.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REDIS_DEFAULT = "redis://127.0.0.1:6379/11"
RECEIVED = re.compile(r"Task kloss\.record\[([^\]]+)\] received")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--broker", default=REDIS_DEFAULT)
    p.add_argument("--pool", choices=["prefork", "solo"], default="prefork")
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--kills", type=int, default=200)
    p.add_argument(
        "--top-up", type=int, default=10_000,
        help="before a start, publish this many more if fewer than half are queued; 0: never",
    )  # fmt: skip
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--min-gap", type=float, default=0.5)
    p.add_argument("--max-gap", type=float, default=2.0)
    p.add_argument("--vt", type=float, default=10.0, help="Redis visibility_timeout, seconds")
    p.add_argument("--workdir", default=None, help="where ids and worker logs go")
    p.add_argument(
        "--redeliver", type=float, default=None, metavar="S",
        help="ticks recorded in a store, guarded workers, redelivery after S s (Redis only)",
    )  # fmt: skip
    p.add_argument("--pg-admin", default="postgresql://postgres@127.0.0.1:5432/test")
    return p.parse_args(argv)


class Run:
    """One experiment: its queue, its files, its worker processes."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.name = f"kloss-{uuid.uuid4().hex[:8]}"
        self.dir = Path(args.workdir or tempfile.mkdtemp(prefix=f"{self.name}-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.out = self.dir / "executed.ids"
        self.out.touch()
        self.env = {
            **os.environ,
            "KLOSS_BROKER": args.broker,
            "KLOSS_QUEUE": self.name,
            "KLOSS_OUT": str(self.out),
            "KLOSS_VT": str(args.vt),
            "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent)]),
        }
        os.environ.update({k: v for k, v in self.env.items() if k.startswith("KLOSS_")})
        self.ids: list[str] = []
        self.started = 0
        self.redelivering: Any = None
        self.store_url: str | None = None
        if args.redeliver is not None:  # bench/kill_loss_redeliver.py
            from kill_loss_redeliver import Redelivering, configure
            from pgdb import make_db

            self.store_url = make_db(args.pg_admin)
            configure(self.env, self.store_url, args.broker)
            self.redelivering = Redelivering(self.name, args.redeliver, self.store_url)

    @property
    def is_redis(self) -> bool:
        return bool(self.args.broker.startswith("redis"))

    def executed(self) -> collections.Counter[str]:
        return collections.Counter(self.out.read_text().split())

    def spawn(self) -> subprocess.Popen[bytes]:
        """A plain ``celery worker`` in a new session (its own process group)."""
        self.started += 1
        log = self.dir / f"worker-{self.started:04d}.log"
        cmd = [
            sys.executable, "-m", "celery", "-A", "broker_kill_app", "worker",
            "-P", self.args.pool, "-c", str(self.args.concurrency), "-Q", self.name,
            "-n", f"{self.name}-{self.started}@%h", "-l", "INFO", "-f", str(log),
            "--without-mingle", "--without-gossip",
        ]  # fmt: skip
        return subprocess.Popen(
            cmd, cwd=HERE, env=self.env, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip


def publish(run: Run, count: int) -> float:
    """Publish ``count`` more tasks, with ids ``<queue>-000000`` onwards; returns seconds."""
    from broker_kill_app import TASK_NAME, app

    t = time.monotonic()
    first = len(run.ids)
    if run.redelivering is not None:  # beat-recorded ticks
        run.ids.extend(run.redelivering.publish(first, count))
        return time.monotonic() - t
    new = [f"{run.name}-{i:07d}" for i in range(first, first + count)]
    with app.producer_or_acquire() as producer:
        for task_id in new:
            app.send_task(TASK_NAME, task_id=task_id, queue=run.name, producer=producer)
    run.ids.extend(new)
    return time.monotonic() - t


def backlog(run: Run) -> int:
    """Messages ready in the queue (not counting unacked ones)."""
    if run.is_redis:
        import redis

        client = redis.Redis.from_url(run.args.broker)
        return sum(int(client.llen(key)) for key in redis_lists(run))
    from kombu import Connection

    with Connection(run.args.broker) as conn:
        return int(conn.default_channel.queue_declare(run.name, passive=True).message_count)


def redis_lists(run: Run) -> list[str]:
    """kombu's Redis queue keys: the queue name, and one per non-zero priority step."""
    return [run.name] + [f"{run.name}\x06\x16{pri}" for pri in (3, 6, 9)]


def wait_progress(run: Run, size: int, proc: subprocess.Popen[bytes], limit: float) -> bool:
    """True once the id file grew past ``size`` (the worker is consuming)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and proc.poll() is None:
        if run.out.stat().st_size > size:
            return True
        time.sleep(0.02)
    return False


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def kill_loop(run: Run, rng: random.Random) -> dict[str, Any]:
    """Start, let consume, SIGKILL the process group; ``--kills`` times."""
    kills, idle_starts, top_up_seconds = 0, 0, 0.0
    for _ in range(run.args.kills):
        if run.args.top_up and backlog(run) < run.args.top_up // 2:
            top_up_seconds += publish(run, run.args.top_up)
        size = run.out.stat().st_size
        proc = run.spawn()
        try:
            if not wait_progress(run, size, proc, limit=30.0):
                idle_starts += 1  # nothing left to consume (or restores not due yet)
                if len(run.executed()) >= len(run.ids) or idle_starts >= 3:
                    break
                continue
            time.sleep(rng.uniform(run.args.min_gap, run.args.max_gap))
        finally:
            kill_group(proc)
        kills += 1
        if kills % 25 == 0:
            print(f"  {kills} kills, {len(run.executed())} ids executed", flush=True)
    return {"kills": kills, "idle_starts": idle_starts, "top_up_seconds": round(top_up_seconds, 1)}


def drain(run: Run) -> dict[str, Any]:
    """A last worker, until every id ran or nothing new ran for 3x the visibility timeout."""
    quiet_limit = 3 * run.args.vt + 3 * (run.args.redeliver or 0)
    proc = run.spawn()
    t0 = last_change = time.monotonic()
    seen = -1
    try:
        while time.monotonic() - last_change < quiet_limit:
            n = len(run.executed())
            if n != seen:
                seen, last_change = n, time.monotonic()
            if n >= len(run.ids):
                break
            time.sleep(1.0)
    finally:
        proc.send_signal(signal.SIGTERM)  # warm shutdown: Redis restores its own unacked
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            kill_group(proc)
    return {"drain_seconds": round(time.monotonic() - t0, 1)}


def ids_of(payloads: list[dict[str, Any]]) -> set[str]:
    return {str(p.get("headers", {}).get("id")) for p in payloads}


def leftovers_redis(run: Run) -> dict[str, set[str]]:
    """Task ids still in the queue lists and in the unacked hash (read-only)."""
    import redis
    from broker_kill_app import redis_transport_options

    opts = redis_transport_options(run.name, run.args.vt)
    client = redis.Redis.from_url(run.args.broker)
    queued = [json.loads(raw) for key in redis_lists(run) for raw in client.lrange(key, 0, -1)]
    unacked = [json.loads(raw)[0] for raw in client.hvals(opts["unacked_key"])]
    return {"queue": ids_of(queued), "unacked": ids_of(unacked)}


def leftovers_amqp(run: Run) -> dict[str, set[str]]:
    """Task ids still in the RabbitMQ queue (taken off with no-ack: the run is over)."""
    from kombu import Connection

    found: set[str] = set()
    with Connection(run.args.broker) as conn:
        chan = conn.default_channel
        while (msg := chan.basic_get(run.name, no_ack=True)) is not None:
            found.add(str(msg.headers.get("id")))
    return {"queue": found, "unacked": set()}


def received_in_logs(run: Run) -> set[str]:
    found: set[str] = set()
    for log in run.dir.glob("worker-*.log"):
        found.update(RECEIVED.findall(log.read_text(errors="replace")))
    return found


def cleanup(run: Run) -> None:
    """Remove this run's queue, unacked keys and bindings (SIGKILLed workers leave pidbox ones)."""
    if not run.is_redis:
        from kombu import Connection

        with Connection(run.args.broker) as conn:
            conn.default_channel.queue_delete(run.name)
        return
    import redis
    from broker_kill_app import redis_transport_options

    opts = redis_transport_options(run.name, run.args.vt)
    client = redis.Redis.from_url(run.args.broker)
    keys = [*redis_lists(run), opts["unacked_key"], opts["unacked_index_key"]]
    keys += [opts["unacked_mutex_key"], *client.keys(f"_kombu.binding*{run.name}*")]
    client.delete(*keys)
    pidbox = "_kombu.binding.celery.pidbox"
    mine = [m for m in client.smembers(pidbox) if run.name.encode() in m]
    if mine:
        client.srem(pidbox, *mine)
    if not client.scard(pidbox):
        client.zrem("_kombu.binding_deadlines", "celery.pidbox")


def report(run: Run, seed: int, facts: dict[str, Any]) -> dict[str, Any]:
    executed = run.executed()
    lost = sorted(set(run.ids) - set(executed))
    left = leftovers_redis(run) if run.is_redis else leftovers_amqp(run)
    received = received_in_logs(run)
    return {
        "broker": run.args.broker, "pool": run.args.pool, "queue": run.name,
        "seed": seed, "messages_published": len(run.ids), **facts,
        "executed_unique": len(executed),
        "executed_twice_or_more": sum(1 for n in executed.values() if n > 1),
        "lost": len(lost),
        "lost_still_in_queue": sum(1 for i in lost if i in left["queue"]),
        "lost_in_unacked_hash": sum(1 for i in lost if i in left["unacked"]),
        "lost_nowhere_on_broker": sum(
            1 for i in lost if i not in left["queue"] and i not in left["unacked"]
        ),
        "lost_logged_received": sum(1 for i in lost if i in received),
        "lost_ids": lost[:50],
        "workdir": str(run.dir),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    run = Run(args)
    print(f"run {run.name} seed={seed} broker={args.broker} pool={args.pool} dir={run.dir}")
    t0 = time.monotonic()
    facts: dict[str, Any] = {"publish_seconds": round(publish(run, args.messages), 1)}
    print(f"published {len(run.ids)} in {facts['publish_seconds']} s", flush=True)
    facts.update(kill_loop(run, rng))
    facts["executed_before_drain"] = len(run.executed())
    facts.update(drain(run))
    facts["duration_seconds"] = round(time.monotonic() - t0, 1)
    if run.redelivering is not None:
        facts.update(run.redelivering.facts())
    result = report(run, seed, facts)
    print(json.dumps(result, indent=2))
    cleanup(run)
    if run.redelivering is not None:
        from pgdb import drop_db

        run.redelivering.close()
        drop_db(args.pg_admin, str(run.store_url))
    return 1 if result["lost"] else 0


if __name__ == "__main__":
    sys.exit(main())
