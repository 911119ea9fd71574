"""Namespaces (issue 40, SPEC §16): two leaders on one store, each bursting at once.

N namespaces on one store are N independent leaders (each its own schedules, fence row and store
lease). This bench measures what two leaders bursting at the same instant get next to one, on
this machine, in one run:

1. **single**: one ``celery beat -S celery_durable_beat.Scheduler`` process, namespace ``alpha``,
   ``--ticks`` schedules due at one instant;
2. **double**: two such processes, namespaces ``alpha`` and ``beta``, ``--ticks`` due schedules
   each, all due at the same instant.

Each run has a fresh PostgreSQL database (``pgdb.make_db``, the schema made with ``migrate``
before any beat starts) and a flushed Redis database as the broker (db 14,
``DURABLE_BEAT_BENCH_REDIS``; each namespace publishes to a queue of its own, nothing consumes
them). The beats start with nothing due and config sync of an empty ``beat_schedule``; once every
beat holds its namespace's store lease, the rows are seeded server-side (``generate_series``),
due at an instant ``--lead`` seconds ahead by the store's clock, and analysed. A leader sleeps
until its earliest due instant, so the burst starts at that instant for both. A leader's time is
from the due instant to its last ``enqueued`` audit record (``recorded_at_ms``, the store's
clock, written once the publish was confirmed); its rate is ``--ticks`` over that time. Every
tick is checked published (``LLEN`` of its namespace's queue), audited and advanced, and in a
namespace other than the default its id and ``periodic_namespace`` header name the namespace.

The runs go in pairs, single then double (``--pairs``); each double's rates are read as ratios
of the single leader's rate of its own pair, and the table gives the medians and ranges over the
pairs. Also printed: the load average at each start and, over the burst (``/proc``), each beat's
CPU, the CPU of the PostgreSQL backends serving the run's database (``pg_stat_activity``) and the
machine's busy cores, to tell a leader slowed by the store from one short of a core: the CPU a
tick costs does not move with the machine's load, the wall-clock rate does.

    .venv/bin/python bench/bench_namespaces.py [--pairs 3] [--ticks 10000] [--batch-size 500]

The same file is the beats' Celery app (``celery -A bench_namespaces:app``), configured from the
environment that ``Beat`` writes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PG = os.environ.get("DURABLE_BEAT_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("DURABLE_BEAT_BENCH_REDIS", "redis://127.0.0.1:6379/14")
DRIVER = "nsbench-driver"
"""The ``application_name`` of this script's own connections, left out of the CPU figures."""
SINGLE = ("alpha",)
DOUBLE = ("alpha", "beta")
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0


def queue_of(namespace: str) -> str:
    return f"nsbench-{namespace}"


# -- the beats' app ------------------------------------------------------------------------------
def beat_app() -> Any:
    """The app one beat process runs: its namespace, store and broker from the environment."""
    from celery import Celery

    namespace = os.environ["NSBENCH_NAMESPACE"]
    beat = Celery(f"nsbench-{namespace}", broker=os.environ["NSBENCH_BROKER"])
    beat.conf.update(
        durable_beat_url=os.environ["NSBENCH_STORE"],
        durable_beat_namespace=namespace,
        durable_beat_batch_size=int(os.environ["NSBENCH_BATCH_SIZE"]),
        task_default_queue=queue_of(namespace),
        beat_schedule={},
        timezone="UTC",
    )
    return beat


if os.environ.get("NSBENCH_NAMESPACE"):  # imported by ``celery -A bench_namespaces:app``
    app = beat_app()


class Beat:
    """One ``celery beat`` process of one namespace, its output in a log file."""

    def __init__(self, namespace: str, store_url: str, broker: str, batch: int, workdir: Path):
        self.namespace = namespace
        self.log_path = workdir / f"beat-{namespace}.log"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
            "NSBENCH_NAMESPACE": namespace,
            "NSBENCH_STORE": store_url,
            "NSBENCH_BROKER": broker,
            "NSBENCH_BATCH_SIZE": str(batch),
        }
        env.pop("DURABLE_BEAT_URL", None)  # it would override the app's durable_beat_url
        command = [sys.executable, "-m", "celery", "-A", "bench_namespaces:app", "beat"]
        command += ["-S", "celery_durable_beat.Scheduler", "--loglevel", "INFO"]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                command,
                cwd=workdir,  # stock beat's files, if any, go to the run's temporary directory
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, ended as a whole by stop()
            )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def stop(self) -> None:
        """SIGTERM to its process group, SIGKILL if it is still there after STOP_TIMEOUT_S."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self.proc.poll() is not None:
                return
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                continue


# -- the store -----------------------------------------------------------------------------------
SEED_SQL = """
    INSERT INTO durable_beat_schedules
        (namespace, name, name_key, definition, definition_hash, version, source, state,
         next_tick_ms, next_due_ms, last_tick_ms, last_outcome, failures, epoch, created_at_ms,
         updated_at_ms)
    SELECT %(namespace)s, 'sched-' || lpad(g::text, 8, '0'), 'sched-' || lpad(g::text, 8, '0'),
           CAST(%(definition)s AS json), %(hash)s, 1, 'api', 'active', %(due)s, %(due)s,
           NULL, NULL, 0, 1, %(now)s, %(now)s
    FROM generate_series(1, %(count)s) AS g
"""


def seed(conn: Any, namespace: str, count: int, due_ms: int, now_ms: int) -> None:
    """``count`` API schedules of ``namespace``, every one due at ``due_ms`` (an interval of 30
    days, so each fires once in the run), inserted server-side as in ``bench_scale.py``."""
    from celery_durable_beat.model import Definition
    from celery_durable_beat.schedules.spec import IntervalSpec

    d = Definition(
        name="x", task="bench.noop", spec=IntervalSpec(86_400_000 * 30), kwargs={"pad": "x" * 64}
    )
    params = {
        "namespace": namespace,
        "definition": json.dumps(d.to_json()),
        "hash": d.definition_hash(),
        "due": due_ms,
        "now": now_ms,
        "count": count,
    }
    conn.exec_driver_sql(SEED_SQL, params)


@contextmanager
def autocommit(engine: Any) -> Iterator[Any]:
    """A connection of ``engine`` in autocommit: every poll sees what has committed since."""
    with engine.connect() as conn:
        yield conn.execution_options(isolation_level="AUTOCOMMIT")


def store_now_ms(conn: Any) -> int:
    sql = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
    return int(conn.exec_driver_sql(sql).scalar_one())


def leading(conn: Any, namespaces: Sequence[str]) -> set[str]:
    """The namespaces whose store lease is held now (their fence row's token, unexpired)."""
    rows = conn.exec_driver_sql(
        "SELECT namespace FROM durable_beat_fence WHERE token IS NOT NULL AND expires_at_ms > "
        "(extract(epoch FROM clock_timestamp()) * 1000)::bigint AND namespace = ANY(%(ns)s)",
        {"ns": list(namespaces)},
    ).all()
    return {row[0] for row in rows}


def settled(conn: Any) -> dict[str, tuple[int, int]]:
    """Per namespace: its ``enqueued`` records and the newest one's ``recorded_at_ms``."""
    rows = conn.exec_driver_sql(
        "SELECT namespace, count(*), max(recorded_at_ms) FROM durable_beat_audit "
        "WHERE outcome = 'enqueued' GROUP BY namespace"
    ).all()
    return {row[0]: (int(row[1]), int(row[2])) for row in rows}


def advanced(conn: Any, due_ms: int) -> dict[str, int]:
    rows = conn.exec_driver_sql(
        "SELECT namespace, count(*) FROM durable_beat_schedules WHERE next_tick_ms > %(due)s "
        "GROUP BY namespace",
        {"due": due_ms},
    ).all()
    return {row[0]: int(row[1]) for row in rows}


def ids_outside(conn: Any, namespace: str) -> int:
    """``enqueued`` records of ``namespace`` whose task id does not start with ``<namespace>:``."""
    return int(
        conn.exec_driver_sql(
            "SELECT count(*) FROM durable_beat_audit WHERE outcome = 'enqueued' "
            "AND namespace = %(ns)s AND left(task_id, %(n)s) <> %(prefix)s",
            {"ns": namespace, "n": len(namespace) + 1, "prefix": f"{namespace}:"},
        ).scalar_one()
    )


# -- the machine ---------------------------------------------------------------------------------
def machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of all cores, from the first line of ``/proc/stat``."""
    fields = [float(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    total = sum(fields[:8])  # user .. steal (guest time is already in user)
    return total - idle, total


def wait_for(what: str, check: Callable[[], bool], timeout: float, beats: Sequence[Beat]) -> None:
    """Poll ``check`` every 0.1 s until it holds; raise after ``timeout`` or if a beat died."""
    deadline = time.monotonic() + timeout
    while not check():
        for beat in beats:
            if not beat.alive():
                raise RuntimeError(f"beat {beat.namespace} exited while {what}:\n{beat.log_tail()}")
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- beat {b.namespace}\n{b.log_tail()}" for b in beats)
            raise TimeoutError(f"{what}: not done in {timeout:.0f} s\n{tails}")
        time.sleep(0.1)


# -- one run -------------------------------------------------------------------------------------
@dataclass
class CpuSample:
    """CPU seconds used so far by the beats and by the PostgreSQL backends serving them, the
    machine's busy and total jiffies, and when (``time.monotonic``)."""

    beats: dict[str, float]
    backends: dict[int, float]
    machine: tuple[float, float]
    at: float


def sample_cpu(conn: Any, beats: Sequence[Beat]) -> CpuSample:
    from procstat import cpu_of

    pids = conn.exec_driver_sql(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name <> %(me)s",
        {"me": DRIVER},
    ).scalars()
    return CpuSample(
        beats={b.namespace: cpu_of(b.proc.pid) for b in beats},
        backends={pid: cpu_of(pid) for pid in pids},
        machine=machine_cpu(),
        at=time.monotonic(),
    )


def cpu_between(before: CpuSample, after: CpuSample) -> dict[str, Any]:
    """What the burst used: each beat's CPU seconds, its database's backends' (one opened
    during the burst counts whole), and the machine's busy cores over the window (from just
    before the due instant to the poll that saw the last tick, at most 0.1 s after it)."""
    busy = after.machine[0] - before.machine[0]
    total = after.machine[1] - before.machine[1]
    return {
        "beat_cpu_s": {ns: after.beats[ns] - before.beats[ns] for ns in after.beats},
        "pg_cpu_s": sum(cpu - before.backends.get(pid, 0.0) for pid, cpu in after.backends.items()),
        "machine_busy_cores": busy / total * (os.cpu_count() or 1),
        "window_s": after.at - before.at,
    }


def start_burst(engine: Any, namespaces: Sequence[str], options: argparse.Namespace) -> int:
    """Seed ``--ticks`` schedules in each namespace, all due ``--lead`` seconds from now by the
    store's clock, and analyse them; the due instant."""
    with engine.begin() as conn:
        now_ms = store_now_ms(conn)
        due_ms = now_ms + round(options.lead * 1000)
        for namespace in namespaces:
            seed(conn, namespace, options.ticks, due_ms, now_ms)
    with autocommit(engine) as conn:
        conn.exec_driver_sql("ANALYZE durable_beat_schedules")
        ahead_s = (due_ms - store_now_ms(conn)) / 1000
    if ahead_s < 1.2:  # a beat sleeping one poll (1 s) might wake after the due instant
        raise RuntimeError(f"seeding left {ahead_s:.2f} s before the burst: raise --lead")
    return due_ms


def leader_figures(
    conn: Any, broker: Any, namespace: str, ticks: int, due_ms: int
) -> dict[str, Any]:
    """One leader's rate, its ticks checked published, audited and advanced, their ids and the
    ``periodic_namespace`` header naming the namespace."""
    count, last_ms = settled(conn)[namespace]
    queue = queue_of(namespace)
    newest = json.loads(broker.lindex(queue, 0) or b"{}")
    seconds = (last_ms - due_ms) / 1000
    leader: dict[str, Any] = {
        "ticks": ticks,
        "published": int(broker.llen(queue)),
        "audited": count,
        "advanced": advanced(conn, due_ms).get(namespace, 0),
        "ids_without_namespace": ids_outside(conn, namespace),
        "header_namespace": newest.get("headers", {}).get("periodic_namespace"),
        "seconds": seconds,
        "ticks_per_s": ticks / seconds,
    }
    expected = {"published": ticks, "audited": ticks, "advanced": ticks}
    expected |= {"ids_without_namespace": 0, "header_namespace": namespace}
    if any(leader[k] != v for k, v in expected.items()):
        raise AssertionError(f"namespace {namespace}: expected {expected}, got {leader}")
    return leader


def run_case(options: argparse.Namespace, namespaces: Sequence[str]) -> dict[str, Any]:
    """One burst with one beat per namespace, on a fresh database and a flushed broker."""
    import redis
    from pgdb import drop_db, make_db
    from sqlalchemy import create_engine

    from celery_durable_beat.store.sql import SqlStore

    broker = redis.Redis.from_url(options.redis)
    broker.flushdb()
    url = make_db(options.pg)
    engine = create_engine(url, pool_size=2, connect_args={"application_name": DRIVER})
    beats: list[Beat] = []
    workdir = Path(tempfile.mkdtemp(prefix="nsbench-"))
    try:
        store = SqlStore(url)
        store.migrate()  # before any beat: none of them creates the schema
        store.close()
        # one by one, so a beat that fails to start leaves the ones before it to the finally
        beats.extend(Beat(ns, url, options.redis, options.batch_size, workdir) for ns in namespaces)
        with autocommit(engine) as conn:
            wait_for(
                "taking their leases",
                lambda: leading(conn, namespaces) == set(namespaces),
                READY_TIMEOUT_S,
                beats,
            )
        time.sleep(options.settle)  # let the beats' start-up CPU die down
        load = os.getloadavg()
        due_ms = start_burst(engine, namespaces, options)
        with autocommit(engine) as conn:
            time.sleep(max(0.0, (due_ms - store_now_ms(conn)) / 1000 - 0.05))
            before = sample_cpu(conn, beats)

            def all_settled() -> bool:
                done = settled(conn)
                return all(done.get(ns, (0, 0))[0] >= options.ticks for ns in namespaces)

            wait_for("settling the burst", all_settled, options.timeout, beats)
            used = cpu_between(before, sample_cpu(conn, beats))
            leaders = {
                ns: leader_figures(conn, broker, ns, options.ticks, due_ms) for ns in namespaces
            }
        for ns, leader in leaders.items():
            leader["beat_cpu_s"] = used["beat_cpu_s"][ns]
        makespan = max(v["seconds"] for v in leaders.values())
        return {
            "namespaces": list(namespaces),
            "load_at_start": [round(v, 2) for v in load],
            "leaders": leaders,
            "sum_ticks_per_s": sum(v["ticks_per_s"] for v in leaders.values()),
            "all_ticks_per_s_to_last": options.ticks * len(namespaces) / makespan,
            "makespan_s": makespan,
            "pg_cpu_s": used["pg_cpu_s"],
            "machine_busy_cores": used["machine_busy_cores"],
            "window_s": used["window_s"],
        }
    finally:
        for beat in beats:
            beat.stop()
        engine.dispose()
        drop_db(options.pg, url)
        broker.flushdb()
        broker.close()
        for path in workdir.iterdir():
            path.unlink()
        workdir.rmdir()


# -- the report ----------------------------------------------------------------------------------
def describe(run: dict[str, Any]) -> str:
    parts = [
        f"{ns} {v['ticks_per_s']:,.0f}/s ({v['seconds']:.2f} s, beat CPU {v['beat_cpu_s']:.2f} s)"
        for ns, v in run["leaders"].items()
    ]
    load = " ".join(f"{v:.2f}" for v in run["load_at_start"])
    return (
        f"{'; '.join(parts)}; PostgreSQL backends CPU {run['pg_cpu_s']:.2f} s; machine busy "
        f"{run['machine_busy_cores']:.2f} cores; load {load}"
    )


def spread(values: Sequence[float], fmt: str) -> str:
    """``median (min-max)``."""
    med, low, high = statistics.median(values), min(values), max(values)
    return f"{med:{fmt}} ({low:{fmt}}-{high:{fmt}})"


def beat_us_per_tick(run: dict[str, Any]) -> list[float]:
    return [v["beat_cpu_s"] / v["ticks"] * 1e6 for v in run["leaders"].values()]


def pg_us_per_tick(run: dict[str, Any]) -> float:
    return run["pg_cpu_s"] / sum(v["ticks"] for v in run["leaders"].values()) * 1e6


def own_cores(run: dict[str, Any]) -> float:
    """Cores the beats and their backends kept busy, on average over the CPU window."""
    beats = sum(v["beat_cpu_s"] for v in run["leaders"].values())
    return (beats + run["pg_cpu_s"]) / run["window_s"]


def both(single: Sequence[float], double: Sequence[float], fmt: str) -> str:
    return f"{spread(single, fmt)} / {spread(double, fmt)}"


def report(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    single = [s["leaders"]["alpha"]["ticks_per_s"] for s, _ in pairs]

    def ratios(of_double: Callable[[dict[str, Any]], float]) -> list[float]:
        """A double run's figure over its own pair's single-leader rate, pair by pair."""
        return [of_double(d) / s["leaders"]["alpha"]["ticks_per_s"] for s, d in pairs]

    alpha = ratios(lambda d: d["leaders"]["alpha"]["ticks_per_s"])
    beta = ratios(lambda d: d["leaders"]["beta"]["ticks_per_s"])
    combined = ratios(lambda d: d["sum_ticks_per_s"])
    to_last = ratios(lambda d: d["all_ticks_per_s_to_last"])
    singles, doubles = [s for s, _ in pairs], [d for _, d in pairs]
    loads = [f"{s['load_at_start'][0]:.2f} / {d['load_at_start'][0]:.2f}" for s, d in pairs]
    rows = [
        ("single leader (alpha), ticks/s", spread(single, ",.0f")),
        ("two leaders: alpha, ratio of single", spread(alpha, ".2f")),
        ("two leaders: beta, ratio of single", spread(beta, ".2f")),
        ("two leaders: alpha + beta, ratio of single", spread(combined, ".2f")),
        ("two leaders: 2N over the time to the last tick, ratio of single",
         spread(to_last, ".2f")),
        ("beat CPU per tick (µs), single / each of two",
         both([beat_us_per_tick(s)[0] for s in singles],
              [u for d in doubles for u in beat_us_per_tick(d)], ".0f")),
        ("PostgreSQL backends' CPU per tick (µs), single / two",
         both([pg_us_per_tick(s) for s in singles], [pg_us_per_tick(d) for d in doubles], ".0f")),
        ("cores kept busy by the beats and their backends, single / two",
         both([own_cores(s) for s in singles], [own_cores(d) for d in doubles], ".2f")),
        ("machine busy cores over the burst (everything), single / two",
         both([s["machine_busy_cores"] for s in singles],
              [d["machine_busy_cores"] for d in doubles], ".2f")),
        ("1-min load average at each start, single / two", ", ".join(loads)),
    ]  # fmt: skip
    print(f"\n{len(pairs)} pairs; median (range):\n")
    print("| case | figure |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    return {
        "single_ticks_per_s": single,
        "alpha_ratio": alpha,
        "beta_ratio": beta,
        "combined_ratio": combined,
        "to_last_ratio": to_last,
    }


def environment(options: argparse.Namespace) -> str:
    import celery
    import kombu
    import psycopg
    import redis

    with psycopg.connect(options.pg.replace("+psycopg", "")) as conn:
        row = conn.execute("SHOW server_version").fetchone()
        pg_version = row[0].split()[0] if row else "?"
    redis_version = redis.Redis.from_url(options.redis).info("server")["redis_version"]
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    return (
        f"{now} on {platform.node()}: nproc {os.cpu_count()}, load average {load}; "
        f"PostgreSQL {pg_version}, Redis {redis_version}, CPython {platform.python_version()}, "
        f"celery {celery.__version__}, kombu {kombu.__version__}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pg", default=PG, help="admin URL; each run makes its own database")
    parser.add_argument("--redis", default=REDIS, help="broker; flushed before and after runs")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--ticks", type=int, default=10_000, help="due ticks per namespace")
    parser.add_argument("--batch-size", type=int, default=500, help="durable_beat_batch_size")
    parser.add_argument("--lead", type=float, default=4.0, help="seconds from seeding to due")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds after leases taken")
    parser.add_argument("--timeout", type=float, default=300.0, help="most seconds a burst takes")
    options = parser.parse_args()
    print(environment(options), flush=True)
    print(
        f"{options.pairs} pairs of runs, {options.ticks:,} due ticks per namespace, "
        f"batch size {options.batch_size}",
        flush=True,
    )
    pairs = []
    for number in range(1, options.pairs + 1):
        single = run_case(options, SINGLE)
        print(f"pair {number} single: {describe(single)}", flush=True)
        double = run_case(options, DOUBLE)
        print(f"pair {number} double: {describe(double)}", flush=True)
        pairs.append((single, double))
    summary = report(pairs)
    print(json.dumps({"pairs": [{"single": s, "double": d} for s, d in pairs], **summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
