"""Ticks a second of a worker with ``install(app)`` and of the same worker without it (SPEC §6:
the guarded worker runs at least 0.8x the plain rate), over the whole matrix.

Every cell is one pool (prefork 2, prefork 4, threads 4, solo) x where the claims live (Redis:
a Redis broker, whose URL the guard then uses for claims; the store: a RabbitMQ broker, so the
claim is the tick's PostgreSQL run row) x ``acks_late`` on or off. A cell runs the plain worker
and the guarded worker back to back (in an order drawn from ``--seed``), each on a fresh store
database and an empty queue holding the same N tick messages, made as beat makes them
(``message.build_message`` published through beat's own ``CeleryPublisher``, so they carry the
``periodic_*`` headers of ``message.tick_headers``); then one worker of ``bench/rate_app.py``
drains them. The rate is taken over the middle 80 % of the runs (by the timestamp each run
appends to a file), so worker start-up and the last stragglers are left out. ``--pairs N`` runs
each cell's pair N times (a fresh order each time) and reports the median of each column: one
pair's ratio moves by up to ±0.2 between runs on a 2-core machine. ``--task-ms`` makes each run
wait that long first (a task that waits on I/O); the target is measured with the no-op task.
``--cpu`` also reports where the CPU went between the 10 % and 90 % marks, µs a tick, by
process group (the worker's processes, Redis, PostgreSQL, RabbitMQ, the rest), read from
``/proc`` (the services must run on this machine), the medians of each cell's pairs.

    .venv/bin/python bench/worker_rate.py                  # the whole matrix, 2,000 ticks
    .venv/bin/python bench/worker_rate.py --quick          # 600 ticks, prefork 2 and threads 4
    .venv/bin/python bench/worker_rate.py --pool solo:1 --claims redis --acks on
    .venv/bin/python bench/worker_rate.py --pairs 3        # the median of three pairs a cell
    .venv/bin/python bench/worker_rate.py --task-ms 5      # each run waits 5 ms first
    .venv/bin/python bench/worker_rate.py --cpu            # and CPU a tick, by process
    .venv/bin/python bench/worker_rate.py --profile /tmp/prof ...   # py-spy, each worker

PostgreSQL, Redis and RabbitMQ come from ``DURABLE_BEAT_TEST_PG``, ``DURABLE_BEAT_TEST_REDIS``
(its database is flushed) and ``DURABLE_BEAT_TEST_AMQP``. ``--profile`` needs py-spy (the
``dev`` extra) and writes one collapsed-stack file per worker run, all processes included.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import procstat
import redis
from celery import Celery
from pgdb import drop_db, make_db

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from celery_durable_beat import tick_task_id  # noqa: E402
from celery_durable_beat.message import build_message  # noqa: E402
from celery_durable_beat.model import Definition  # noqa: E402
from celery_durable_beat.publish.celery_publisher import CeleryPublisher  # noqa: E402
from celery_durable_beat.schedules.spec import IntervalSpec  # noqa: E402
from tests.support.rig import ensure_schema  # noqa: E402

PG = os.environ.get("DURABLE_BEAT_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("DURABLE_BEAT_TEST_REDIS", "redis://127.0.0.1:6379/14")
AMQP = os.environ.get("DURABLE_BEAT_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672//")
T0 = 1_800_000_000_000
STEP_MS = 60_000
SCHEDULES = 100
POOLS = ("prefork:2", "prefork:4", "threads:4", "solo:1")
CLAIMS = {"redis": "the broker's Redis", "store": "PostgreSQL rows (RabbitMQ broker)"}
DRAIN_S = 600.0
GROUPS = ("worker", "redis", "postgres", "rabbitmq", "rest")
_SERVICES = {"redis-server": "redis", "postgres": "postgres", "beam.smp": "rabbitmq"}


@dataclass(frozen=True)
class Cell:
    pool: str
    claims: str
    acks_late: bool

    @property
    def broker(self) -> str:
        return REDIS if self.claims == "redis" else AMQP

    def label(self) -> str:
        return f"{self.pool} {self.claims} acks_late={'on' if self.acks_late else 'off'}"


def publish(broker: str, queue: str, count: int) -> None:
    """``count`` ticks of ``SCHEDULES`` schedules, made and published as beat does."""
    app = Celery("bench-beat", broker=broker, set_as_current=False)
    app.conf.task_default_queue = queue
    definitions = [
        Definition(f"rate-{i:03d}", "rate.tick", IntervalSpec(STEP_MS)) for i in range(SCHEDULES)
    ]
    with CeleryPublisher(app).session() as session:
        for i in range(count):
            d = definitions[i % SCHEDULES]
            tick = T0 + (i // SCHEDULES) * STEP_MS
            message = build_message(d.name, d, tick, tick_task_id(d.name, tick))
            if session.publish(message) is not None:
                raise SystemExit(f"publish refused tick {i}")
        if session.confirm() is not None:
            raise SystemExit("the broker did not confirm the ticks")
    app.close()


def delete_queue(broker: str, queue: str) -> None:
    app = Celery("bench-cleanup", broker=broker, set_as_current=False)
    with app.connection_for_write() as conn:
        conn.default_channel.queue_delete(queue)
    app.close()


def lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def worker_command(cell: Cell, queue: str, profile: Path | None) -> list[str]:
    name, _, concurrency = cell.pool.partition(":")
    command = [sys.executable, "-m", "celery", "-A", "rate_app", "worker", "-l", "WARNING"]
    command += ["-P", name, "-c", concurrency or "1", "-Q", queue, "-n", f"rate-{queue}@%h"]
    command += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    if profile is None:
        return command
    py_spy = Path(sys.executable).with_name("py-spy")
    spy = [str(py_spy), "record", "-r", "200", "-s", "-f", "raw", "-o", str(profile)]
    return [*spy, "--", *command]


Reading = dict[tuple[str, str], tuple[str, float]]
"""Each process's group and CPU seconds so far, keyed by (pid, start time): a pid reused meanwhile
is another process."""


def cpu_reading(worker_pgrp: int) -> Reading:
    """Every process's group and CPU (user + system) seconds used so far."""
    found: Reading = {}
    for entry in Path("/proc").iterdir():
        stat = procstat.read(entry.name) if entry.name.isdigit() else None
        if stat is None:
            continue  # not a process, or it ended meanwhile
        comm, fields = stat
        group = "worker" if int(fields[2]) == worker_pgrp else _SERVICES.get(comm, "rest")
        found[(entry.name, fields[19])] = (group, procstat.cpu_seconds(fields))
    return found


def cpu_between(before: Reading, after: Reading) -> dict[str, float]:
    """CPU seconds each group used between two readings: each process's own growth, so a process
    that ended between them counts nothing rather than minus all it ever used (its last moments
    are lost: /proc no longer has them)."""
    used = dict.fromkeys(GROUPS, 0.0)
    for key, (group, seconds) in after.items():
        used[group] += seconds - before.get(key, (group, 0.0))[1]
    return used


@dataclass
class Run:
    rate: float
    cpu_us: dict[str, float]
    """µs of CPU a tick by group between the 10 % and 90 % marks (empty without ``--cpu``)."""


def one_run(
    cell: Cell,
    guard: bool,
    count: int,
    workdir: Path,
    profile: Path | None,
    task_ms: float,
    cpu: bool = False,
) -> Run:
    """Ticks a second over the middle 80 % of ``count`` runs by one worker."""
    store = make_db(PG)
    ensure_schema(store)
    queue = f"rate-{uuid.uuid4().hex[:8]}"
    if cell.claims == "redis":
        client = redis.Redis.from_url(REDIS)
        client.flushdb()
        client.close()
    ticks = workdir / f"{queue}.txt"
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'bench'}",
        "RATE_BROKER": cell.broker,
        "RATE_QUEUE": queue,
        "DURABLE_BEAT_URL": store,
        "TICKS_FILE": str(ticks),
        "GUARD": "1" if guard else "0",
        "ACKS_LATE": "1" if cell.acks_late else "0",
        "TASK_MS": str(task_ms),
    }
    publish(cell.broker, queue, count)
    proc = subprocess.Popen(
        worker_command(cell, queue, profile),
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    marks: list[tuple[int, Reading]] = []
    try:
        deadline = time.monotonic() + DRAIN_S
        while (done := lines(ticks)) < count:
            if time.monotonic() > deadline:
                raise SystemExit(f"{cell.label()} guard={guard}: {done} of {count}")
            if cpu and done >= count // 10 * (1 + 8 * len(marks)) and len(marks) < 2:
                marks.append((done, cpu_reading(proc.pid)))
            time.sleep(0.02 if cpu else 0.2)  # a poll of the evidence file, on a deadline
    finally:
        stop(proc, profile is not None)
        if cell.claims == "store":
            delete_queue(cell.broker, queue)
        drop_db(PG, store)
    times = sorted(float(line) for line in ticks.read_text().split())
    skip = count // 10
    cpu_us = {}
    if len(marks) == 2:
        (first, before), (last, after) = marks
        between = cpu_between(before, after)
        cpu_us = {g: between[g] / max(1, last - first) * 1e6 for g in GROUPS}
    return Run((count - 2 * skip) / (times[-skip - 1] - times[skip]), cpu_us)


def stop(proc: subprocess.Popen[bytes], profiled: bool) -> None:
    """SIGKILL the worker's whole process group; py-spy first gets SIGINT, to write its file."""
    if profiled:
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(60)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def cpu_lines(cell: Cell, runs: dict[bool, list[dict[str, float]]]) -> list[str]:
    """One table row per variant measured: the median of each group over the pairs."""
    rows = []
    for guard in (False, True):
        if not runs[guard]:
            continue
        median = {g: statistics.median(r[g] for r in runs[guard]) for g in GROUPS}
        cols = " | ".join(f"{median[g]:.0f}" for g in GROUPS)
        variant = "guarded" if guard else "plain"
        acks = "on" if cell.acks_late else "off"
        rows.append(
            f"| {cell.pool} {variant} | {cell.claims} | {acks} | {cols} "
            f"| {sum(median.values()):.0f} |"
        )
    return rows


def cells(args: argparse.Namespace) -> list[Cell]:
    pools = args.pool or (["prefork:2", "threads:4"] if args.quick else list(POOLS))
    claims = args.claims or list(CLAIMS)
    acks = [a == "on" for a in args.acks] if args.acks else [True, False]
    return [Cell(p, c, a) for p in pools for c in claims for a in acks]


def commit() -> str:
    found = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return found.stdout.strip() or "unknown"


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pool", action="append", help="pool:concurrency (prefork:2)")
    parser.add_argument("--claims", action="append", choices=list(CLAIMS))
    parser.add_argument("--acks", action="append", choices=["on", "off"], help="acks_late")
    parser.add_argument("--ticks", type=int, help="ticks per run (2,000; --quick: 600)")
    parser.add_argument("--quick", action="store_true", help="fewer ticks, two pools")
    parser.add_argument("--seed", type=int, default=24, help="draws plain/guarded order")
    parser.add_argument("--profile", type=Path, help="a folder for py-spy's stacks")
    parser.add_argument("--pairs", type=int, default=1, help="pairs a cell, medians reported")
    parser.add_argument("--task-ms", type=float, default=0.0, help="each run waits this long")
    parser.add_argument("--cpu", action="store_true", help="CPU a tick by process group too")
    args = parser.parse_args()
    if args.pairs < 1 or args.task_ms < 0:
        parser.error("--pairs must be at least 1 and --task-ms at least 0")
    count = args.ticks or (600 if args.quick else 2000)
    rng = random.Random(args.seed)
    print(
        f"commit {commit()}, seed {args.seed}, {count} ticks a run, one worker a run, "
        f"{args.pairs} pair(s) a cell (medians), task waits {args.task_ms:g} ms"
    )
    print(f"uptime: {uptime()}")
    print("| pool | claims | acks_late | plain (ticks/s) | guarded (ticks/s) | ratio |")
    print("|---|---|---|---|---|---|")
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    cpu_rows: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for cell in cells(args):
            plain, guarded, ratios = [], [], []
            cpu_runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
            for _pair in range(args.pairs):
                rates = {}
                order = [False, True]
                rng.shuffle(order)
                for guard in order:
                    profile = None
                    if args.profile:
                        tag = cell.label().replace(" ", "_").replace(":", "")
                        profile = args.profile / f"{tag}_{'guarded' if guard else 'plain'}.txt"
                    run = one_run(cell, guard, count, Path(tmp), profile, args.task_ms, args.cpu)
                    rates[guard] = run.rate
                    if run.cpu_us:
                        cpu_runs[guard].append(run.cpu_us)
                plain.append(rates[False])
                guarded.append(rates[True])
                ratios.append(rates[True] / rates[False])
            acks = "on" if cell.acks_late else "off"
            spread = f" ({min(ratios):.2f}-{max(ratios):.2f})" if args.pairs > 1 else ""
            print(
                f"| {cell.pool} | {cell.claims} | {acks} | {statistics.median(plain):.0f} "
                f"| {statistics.median(guarded):.0f} | {statistics.median(ratios):.2f}{spread} |",
                flush=True,
            )
            cpu_rows += cpu_lines(cell, cpu_runs)
    if cpu_rows:
        print("\nCPU a tick between the 10 % and 90 % marks, µs, medians of the pairs:\n")
        print("| pool | claims | acks_late | worker | " + " | ".join(GROUPS[1:]) + " | all |")
        print("|---|---|---|" + "---|" * len(GROUPS) + "---|")
        print("\n".join(cpu_rows))
    print(f"uptime at the end: {uptime()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
