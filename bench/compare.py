"""Stock beat, RedBeat and celery_durable_beat through one harness, in one run (issue 16).

Each case runs in a fresh subprocess (so its RSS is the scheduler's own), after its schedules were
stored by another subprocess: stock beat's in ``beat_schedule`` plus a fresh shelve file in a temp
dir, RedBeat's with ``RedBeatSchedulerEntry(...).save()`` under a key prefix of this run, ours by a
server-side bulk insert (``bench_scale.seed``) into a throwaway PostgreSQL database
(``pgdb.make_db``), config sync on (the default) with an empty config. Measured, per scheduler:

1. the idle round (median ms, nothing due): stock beat's ``tick()``; RedBeat's ``tick()`` with
   its lock held (lock extend + schedule read); ours ``Scheduler.tick()`` forced past its
   monotonic wake-up time, so every call is a real round (lease renew + store probe);
2. RSS of that process after startup and the idle rounds;
3. startup with the schedules already stored: import the scheduler's module and construct it
   (Celery and the app are loaded before the clock starts); then its first tick, timed apart,
   and the peak RSS (``ru_maxrss``) by its end;
4. a burst: N schedules due at once, ``tick()`` called as beat's loop does until it says nothing
   more is due; only messages found in the Redis queue (LLEN) count, and for ours only those
   also audited and advanced;
5. that burst as a ratio of a plain ``app.send_task`` loop over one producer, of ready-made
   messages ``LPUSH``ed through a redis-py pipeline (the broker's ceiling) and of RedBeat's
   burst, all in the same run, with the load average as each burst began.

Redis database 15 only (``DURABLE_BEAT_BENCH_REDIS``); queue and keys are named after the run and
deleted after every case. Prints one markdown table and nothing else (failures go to stderr).

    .venv/bin/python bench/compare.py [--sizes 1000,10000,100000] [--quick]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from importlib import metadata
from types import SimpleNamespace
from typing import Any

PG = os.environ.get("DURABLE_BEAT_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("DURABLE_BEAT_BENCH_REDIS", "redis://127.0.0.1:6379/15")
KINDS = ("stock", "redbeat", "ours")
KWARGS = {"pad": "x" * 64}
EVERY_S = 30 * 86_400  # every schedule: an interval of 30 days
CHILD_SLACK_S = 300  # a child's timeout: its own budget plus this (imports, seeding, 100k)


# --- the child side: one case in a fresh process ----------------------------------------------


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


def peak_rss_mb() -> float:
    """The process's largest RSS so far (``ru_maxrss``, kB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1000


def make_app(case: dict[str, Any]) -> Any:
    from celery import Celery

    app = Celery("compare", broker=REDIS, set_as_current=False)
    app.conf.update(
        task_default_queue=case["queue"],
        result_expires=None,  # no celery.backend_cleanup entry: exactly N schedules everywhere
        beat_schedule={},
        redbeat_redis_url=REDIS,
        redbeat_key_prefix=case["queue"] + ":",
        # ours: config sync on, as by default; the config is empty, the rows API-managed
    )
    if case["kind"] == "stock":
        app.conf.beat_schedule = stock_config(case["size"])
    return app


def stock_config(size: int) -> dict[str, Any]:
    return {
        f"sched-{i:08d}": {
            "task": "bench.noop",
            "schedule": dt.timedelta(seconds=EVERY_S),
            "kwargs": KWARGS,
        }
        for i in range(size)
    }


def seed(case: dict[str, Any]) -> dict[str, Any]:
    """Store ``size`` schedules, due now (burst) or in 30 days (idle); then exit."""
    app, size, due = make_app(case), case["size"], case["phase"] == "burst"
    if case["kind"] == "stock":
        from celery.beat import PersistentScheduler

        scheduler = PersistentScheduler(app, schedule_filename=case["shelve"], lazy=False)
        scheduler.sync()
        scheduler.close()
    elif case["kind"] == "redbeat":
        from celery.schedules import schedule
        from redbeat import RedBeatSchedulerEntry

        every = schedule(dt.timedelta(seconds=EVERY_S), app=app)
        now = dt.datetime.now(dt.timezone.utc)
        last = now - dt.timedelta(seconds=EVERY_S + 60) if due else now
        for i in range(size):
            RedBeatSchedulerEntry(
                f"sched-{i:08d}", "bench.noop", every, kwargs=KWARGS, last_run_at=last, app=app
            ).save()
    else:
        from bench_scale import seed as seed_rows

        scheduler = open_ours(app, case)
        store = scheduler.store
        at = store.now_ms() + (-1000 if due else 10 * 86_400_000)
        seed_rows(store, 0, size, at, EVERY_S * 1000)
        with store._get_engine().connect() as conn:  # fresh statistics, as autovacuum would give
            conn.exec_driver_sql("ANALYZE")
        scheduler.close()
    return {}


def open_ours(app: Any, case: dict[str, Any]) -> Any:
    os.environ["DURABLE_BEAT_URL"] = case["db"]
    from celery_durable_beat.scheduler import Scheduler

    return Scheduler(app, lazy=False)


def open_scheduler(app: Any, case: dict[str, Any]) -> tuple[Any, Callable[[], float]]:
    """The scheduler, ready as beat would have it, and the call that runs one real round."""
    kind = case["kind"]
    if kind == "stock":
        from celery.beat import PersistentScheduler

        stock = PersistentScheduler(app, schedule_filename=case["shelve"], lazy=False)
        return stock, stock.tick
    if kind == "redbeat":
        from redbeat.schedulers import RedBeatScheduler, acquire_distributed_beat_lock

        red = RedBeatScheduler(app, lazy=False)
        acquire_distributed_beat_lock(sender=SimpleNamespace(scheduler=red))  # beat_init's job
        return red, red.tick
    ours = open_ours(app, case)

    def tick() -> float:
        ours._wake_at = 0.0  # past the monotonic wake-up: a real round, not its shortcut
        return float(ours.tick())

    return ours, tick


def idle(case: dict[str, Any]) -> dict[str, Any]:
    app = make_app(case)
    t = time.perf_counter()
    scheduler, tick = open_scheduler(app, case)
    startup = time.perf_counter() - t
    t = time.perf_counter()
    tick()
    first_round = time.perf_counter() - t
    peak_first = peak_rss_mb()
    for _ in range(5):
        tick()
    samples: list[float] = []
    deadline = time.perf_counter() + case["budget"]
    while len(samples) < 10 or (len(samples) < 300 and time.perf_counter() < deadline):
        t = time.perf_counter_ns()
        tick()
        samples.append((time.perf_counter_ns() - t) / 1e6)
    rss = rss_mb()
    scheduler.close()
    return {
        "startup_s": startup,
        "first_round_s": first_round,
        "idle_ms": statistics.median(samples),
        "rss_mb": rss,
        "peak_first_mb": peak_first,
        "rounds": len(samples),
    }


def burst(case: dict[str, Any]) -> dict[str, Any]:
    import redis

    app = make_app(case)
    client = redis.Redis.from_url(REDIS)
    scheduler, tick = open_scheduler(app, case)
    if case["kind"] == "stock":  # stock beat's config entries start now: make them all due
        past = scheduler.app.now() - dt.timedelta(seconds=EVERY_S + 60)
        for entry in scheduler.schedule.values():
            entry.last_run_at = past
    deadline = time.perf_counter() + case["budget"]
    t = time.perf_counter()
    while tick() <= 0 and time.perf_counter() < deadline:
        pass
    elapsed = time.perf_counter() - t
    result = {"published": client.llen(case["queue"]), "seconds": elapsed}
    if case["kind"] == "ours":
        result.update(ours_counts(scheduler))
    scheduler.close()
    client.close()
    return result


def ours_counts(scheduler: Any) -> dict[str, int]:
    store = scheduler.store
    with store._get_engine().connect() as conn:
        audited = conn.exec_driver_sql(
            "SELECT count(*) FROM durable_beat_audit WHERE outcome = 'enqueued'"
        ).scalar_one()
        advanced = conn.exec_driver_sql(
            "SELECT count(*) FROM durable_beat_schedules WHERE next_tick_ms > %(now)s",
            {"now": store.now_ms()},
        ).scalar_one()
    return {"audited": audited, "advanced": advanced}


def reference(case: dict[str, Any]) -> dict[str, Any]:
    """The denominator: ``app.send_task`` N times over one producer, no scheduler at all."""
    import redis

    app, size = make_app(case), case["size"]
    client = redis.Redis.from_url(REDIS)
    deadline = time.perf_counter() + case["budget"]
    with app.producer_or_acquire() as producer:
        t = time.perf_counter()
        for i in range(size):
            app.send_task("bench.noop", kwargs=KWARGS, producer=producer)
            if i % 1000 == 999 and time.perf_counter() > deadline:
                break
        elapsed = time.perf_counter() - t
    result = {"published": client.llen(case["queue"]), "seconds": elapsed}
    client.close()
    return result


def pipeline_reference(case: dict[str, Any]) -> dict[str, Any]:
    """The broker's ceiling: one ``send_task`` message, then its bytes ``LPUSH``ed N times
    through a redis-py pipeline (1,000 a round trip): what Redis takes of ready-made messages."""
    import redis

    app, size, queue = make_app(case), case["size"], case["queue"]
    client = redis.Redis.from_url(REDIS)
    with app.producer_or_acquire() as producer:
        app.send_task("bench.noop", kwargs=KWARGS, producer=producer)
    raw = client.rpop(queue)
    pipe = client.pipeline(transaction=False)
    t = time.perf_counter()
    for i in range(size):
        pipe.lpush(queue, raw)
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()
    elapsed = time.perf_counter() - t
    result = {"published": client.llen(queue), "seconds": elapsed}
    client.close()
    return result


def child(raw: str) -> int:
    case = json.loads(raw)
    step = {
        "seed": seed,
        "idle": idle,
        "burst": burst,
        "reference": reference,
        "pipeline": pipeline_reference,
    }[case["step"]]
    print(json.dumps(step(case)), flush=True)
    return 0


# --- the parent side: cases, cleanup, the table ------------------------------------------------


def spawn(case: dict[str, Any], step: str) -> dict[str, Any]:
    """Run one step in a fresh process group; kill the group if it outlives its timeout."""
    timeout = case["budget"] + CHILD_SLACK_S
    cmd = [sys.executable, os.path.abspath(__file__), "--case", json.dumps({**case, "step": step})]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"error": f"timed out after {timeout} s"}
    if proc.returncode != 0 or not out.strip():
        tail = err.strip().splitlines()[-1:] or ["no output"]
        return {"error": f"exit {proc.returncode}: {tail[0]}"}
    return dict(json.loads(out.strip().splitlines()[-1]))


def run_case(kind: str, phase: str, size: int, budget: float) -> dict[str, Any]:
    """Seed, measure, clean up: the database, the run's Redis keys, the temp dir."""
    import redis
    from pgdb import drop_db, make_db

    queue = f"cmp-{uuid.uuid4().hex[:10]}"
    tmp = tempfile.mkdtemp(prefix="compare-")
    case = {
        "kind": kind,
        "phase": phase,
        "size": size,
        "budget": budget,
        "queue": queue,
        "shelve": os.path.join(tmp, "beat-schedule"),
        "db": None,
    }
    try:
        if kind == "ours":
            case["db"] = make_db(PG)
        if kind in ("reference", "pipeline"):
            return {**spawn(case, kind), "load": os.getloadavg()[0]}
        seeded = spawn(case, "seed")
        load = os.getloadavg()[0]  # after seeding, as the measured step starts
        return seeded if "error" in seeded else {**spawn(case, phase), "load": load}
    finally:
        if case["db"]:
            drop_db(PG, case["db"])
        client = redis.Redis.from_url(REDIS)
        keys = list(client.scan_iter(match=f"*{queue}*", count=10_000))
        for start in range(0, len(keys), 10_000):
            client.delete(*keys[start : start + 10_000])
        client.close()
        shutil.rmtree(tmp, ignore_errors=True)


def short(n: int) -> str:
    return (
        f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1000}k" if n % 1000 == 0 else str(n)
    )


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "ms":
        return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 100 else f"{value:.0f}"
    if unit == "s":
        return f"{value:.2f}" if value < 10 else f"{value:.1f}"
    if unit == "x":
        return f"{value:.2f}" if value >= 0.01 else f"{value:.1g}"
    return f"{value:,.0f}"


def credited(kind: str, r: dict[str, Any]) -> int:
    """Messages really in the queue; for ours only those also audited and advanced."""
    if kind == "ours":
        return min(r["published"], r["audited"], r["advanced"])
    return int(r["published"])


def burst_cell(kind: str, size: int, r: dict[str, Any], notes: list[str]) -> tuple[str, float]:
    if "error" in r:
        notes.append(f"{kind} at {size:,}: {r['error']}")
        return "—", 0.0
    done = credited(kind, r)
    rate = done / r["seconds"] if r["seconds"] else 0.0
    cell = fmt(rate, "n")
    if done < size:
        mark = "*" * (len(notes) + 1)
        notes.append(
            f"{mark} {kind} at {size:,}: {done:,} of {size:,} credited in "
            f"{r['seconds']:.0f} s (the budget); the rate is over those"
        )
        cell += mark
    return cell, rate


def table(results: dict[str, Any], sizes: list[int], bursts: list[int], head: str) -> str:
    sz, bz = " / ".join(map(short, sizes)), " / ".join(map(short, bursts))
    names = {"stock": "stock beat", "redbeat": "RedBeat", "ours": "celery_durable_beat"}
    notes: list[str] = []

    def idle_row(key: str, unit: str) -> list[str]:
        cells = []
        for kind in KINDS:
            values = [results[kind]["idle"][s] for s in sizes]
            for s, v in zip(sizes, values, strict=True):
                if "error" in v:
                    notes.append(f"{kind} idle at {s:,}: {v['error']}")
                skipped = f"— at {s:,}: this package alone (--ours-sizes)"
                if v.get("skipped") and skipped not in notes:
                    notes.append(skipped)
            cells.append(" / ".join(fmt(v.get(key), unit) for v in values))
        return cells

    burst_cells, ratio_cells, pipe_cells, red_cells, load_cells = [], [], [], [], []
    ref_rates, pipe_rates = (
        [
            credited(ref, r) / r["seconds"] if "error" not in r and r["seconds"] else 0.0
            for r in (results[ref][s] for s in bursts)
        ]
        for ref in ("reference", "pipeline")
    )
    rates: dict[str, list[float]] = {}
    for kind in KINDS:
        pairs = [burst_cell(kind, s, results[kind]["burst"][s], notes) for s in bursts]
        burst_cells.append(" / ".join(c for c, _ in pairs))
        rates[kind] = [rate for _, rate in pairs]
        load_cells.append(
            " / ".join(fmt(results[kind]["burst"][s].get("load"), "x") for s in bursts)
        )
    for kind in KINDS:
        ratio_cells.append(_ratios(rates[kind], ref_rates))
        pipe_cells.append(_ratios(rates[kind], pipe_rates))
        red_cells.append("—" if kind == "redbeat" else _ratios(rates[kind], rates["redbeat"]))
    refs_text = " / ".join(fmt(r, "n") for r in ref_rates)
    pipes_text = " / ".join(fmt(r, "n") for r in pipe_rates)
    rows = [
        (f"idle round, {sz} schedules (ms, median of a real round)", idle_row("idle_ms", "ms")),
        (f"RSS after load, {sz} (MB)", idle_row("rss_mb", "n")),
        (
            f"startup with the schedules already stored (import + construct), {sz} (s)",
            idle_row("startup_s", "s"),
        ),
        (f"then the first round, {sz} (s)", idle_row("first_round_s", "s")),
        (f"peak RSS by the end of the first round, {sz} (MB)", idle_row("peak_first_mb", "n")),
        (
            f"burst: N due at once, published (+ audited + advanced for ours) (ticks/s), {bz}",
            burst_cells,
        ),
        (
            f"burst as a ratio of plain `app.send_task`, one producer "
            f"({refs_text} msgs/s), same run",
            ratio_cells,
        ),
        (
            f"burst as a ratio of ready-made messages `LPUSH`ed through a redis-py pipeline "
            f"({pipes_text} msgs/s), same run",
            pipe_cells,
        ),
        (f"burst as a ratio of RedBeat's, same run, {bz}", red_cells),
        (f"load average (1 min) as each burst began, {bz}", load_cells),
    ]
    lines = [
        head,
        "",
        "| workload | " + " | ".join(names[k] for k in KINDS) + " |",
        "|---|---|---|---|",
    ]
    lines += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in rows]
    return "\n".join(lines + (["", *notes] if notes else []))


def _ratios(rates: list[float], refs: list[float]) -> str:
    return " / ".join(
        fmt(rate / ref if ref and rate else None, "x")
        for rate, ref in zip(rates, refs, strict=True)
    )


def machine() -> str:
    import psycopg
    import redis

    client = redis.Redis.from_url(REDIS)
    redis_version = client.info("server")["redis_version"]
    client.close()
    with psycopg.connect(PG.replace("+psycopg", "")) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    pg_version = row[0].split()[0] if row else "?"
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    versions = ", ".join(
        f"{name} {metadata.version(name)}" for name in ("celery", "kombu", "celery-redbeat")
    )
    return (
        f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.node()}: "
        f"nproc {os.cpu_count()}, load average at start {load}; Redis {redis_version}, "
        f"PostgreSQL {pg_version}, CPython {platform.python_version()}, {versions}"
    )


def ensure_redbeat() -> None:
    """The comparison needs celery-redbeat in this environment: install it if it is missing."""
    try:
        metadata.version("celery-redbeat")
    except metadata.PackageNotFoundError:
        print("installing celery-redbeat into this environment", file=sys.stderr)
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "celery-redbeat>=2.2"], check=True
        )


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--case":
        return child(sys.argv[2])
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument(
        "--ours-sizes",
        default="1000000",
        help="sizes run for this package alone (stock beat and RedBeat cannot seed a million "
        "schedules in a bench's time); empty for none, default 1000000 unless --quick",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="bursts at 1k and 10k only, shorter budgets (about 8 minutes)",
    )
    parser.add_argument(
        "--bursts", help="burst sizes (default 1000,10000, and 100000 unless --quick)"
    )
    options = parser.parse_args()
    default_bursts = "1000,10000" if options.quick else "1000,10000,100000"
    ensure_redbeat()
    ours_only = [] if options.quick else [int(s) for s in options.ours_sizes.split(",") if s]
    sizes = [int(s) for s in options.sizes.split(",")] + ours_only
    bursts = [int(s) for s in (options.bursts or default_bursts).split(",")]
    idle_budget, burst_budget = (4.0, 40.0) if options.quick else (8.0, 120.0)
    head = machine()
    results: dict[str, Any] = {k: {"idle": {}, "burst": {}} for k in KINDS}
    results["reference"], results["pipeline"] = {}, {}
    for size in sizes:
        for kind in KINDS:
            skip = size in ours_only and kind != "ours"
            results[kind]["idle"][size] = (
                {"skipped": True} if skip else run_case(kind, "idle", size, idle_budget)
            )
    for size in bursts:
        results["reference"][size] = run_case("reference", "burst", size, burst_budget)
        results["pipeline"][size] = run_case("pipeline", "burst", size, burst_budget)
        for kind in KINDS:
            results[kind]["burst"][size] = run_case(kind, "burst", size, burst_budget)
    print(table(results, sizes, bursts, head))
    return 0


if __name__ == "__main__":
    sys.exit(main())
