"""The README's install line, proven from a clean slate: wheel, fresh venv, one tick end to end.

Why: the dev install pulls in far more than a user's ``pip install '.[postgres,redis]'``, so a
dependency missing from an extra (kombu's Redis transport needing ``packaging``) passed every
test and killed every Celery process of a new user at import. This check builds the wheel from
the working tree, installs it with only ``[postgres,redis]`` into a brand-new virtualenv, writes
a tiny app into a temporary folder outside the checkout (so nothing resolves to the source
tree), and runs a beat and a worker from that venv on a fresh PostgreSQL database and a Redis
broker until the worker has executed one tick. Any import or runtime gap fails here.

Environment: ``DURABLE_BEAT_TEST_PG`` (a PostgreSQL URL; a database is created next to it and
dropped after), ``DURABLE_BEAT_TEST_REDIS`` (its host is used, with the database number in
``DURABLE_BEAT_WHEEL_REDIS_DB``, default 13, a number the tests do not use; the queue name is
unique per run, so parallel runs never consume each other's ticks). ``--keep`` leaves the
temporary folder for inspection. Run by ``scripts/check`` before the tests.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
from psycopg import sql
from sqlalchemy.engine import URL, make_url

ROOT = Path(__file__).resolve().parent.parent
EXTRAS = "postgres,redis"
TICK_DEADLINE_S = 90.0
"""Generous: two cold Celery processes on a loaded CI machine; a healthy run takes seconds."""

APP = '''"""One schedule, one task: what a user writes after reading the README."""
import json, os
from celery import Celery
from celery_durable_beat import install

app = Celery("wheelapp", broker=os.environ["WHEEL_BROKER"])
app.conf.update(
    task_default_queue=os.environ["WHEEL_QUEUE"],
    task_ignore_result=True,
    durable_beat_url=os.environ["WHEEL_STORE"],
    durable_beat_poll_interval=0.2,
    beat_schedule={"wheel-tick": {"task": "wheelapp.tick", "schedule": "@every 1s"}},
)
install(app)


@app.task(name="wheelapp.tick", bind=True)
def tick(self):
    import celery_durable_beat
    row = {"id": self.request.id, "package": celery_durable_beat.__file__}
    with open(os.environ["WHEEL_TICKS"], "a") as out:
        out.write(json.dumps(row) + "\\n")
'''


def run(*cmd: str | Path, cwd: Path | None = None) -> None:
    """Run a build step; on failure show its output and stop (the step names the gap)."""
    done = subprocess.run(  # noqa: S603 - our own interpreters and fixed arguments
        [str(part) for part in cmd], cwd=cwd, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise SystemExit(f"wheel check: {Path(str(cmd[0])).name} failed ({done.returncode})")


def build_wheel(work: Path) -> Path:
    """The wheel of the working tree, built from a copy of its files (never a stale build/)."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],  # noqa: S607
            cwd=ROOT,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    src = work / "src"
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", work / "dist", src)
    (wheel,) = (work / "dist").glob("*.whl")
    return wheel


def start_venv(work: Path) -> subprocess.Popen[bytes]:
    """Create the brand-new venv in the background while the wheel builds (both are slow)."""
    base = getattr(sys, "_base_executable", sys.executable)
    return subprocess.Popen(  # noqa: S603 - the base interpreter and fixed arguments
        [base, "-m", "venv", str(work / "venv")], stdout=subprocess.DEVNULL
    )


def install_venv(work: Path, wheel: Path, creating: subprocess.Popen[bytes]) -> Path:
    """The wheel and only the extras the README names, into the new venv; its bin folder.

    ``--no-compile``: each process compiles what it imports; compiling every installed module
    up front cost more than the whole tick.
    """
    if creating.wait() != 0:
        raise SystemExit("wheel check: python -m venv failed")
    bindir = work / "venv" / "bin"
    run(bindir / "python", "-m", "pip", "install", "-q", "--no-compile", f"{wheel}[{EXTRAS}]")
    return bindir


def fresh_database(admin: URL, name: str, *, drop: bool = False) -> None:
    """Create (or drop) the check's own database; the name is quoted as an identifier."""
    dsn = admin.set(drivername="postgresql", database="postgres")
    with psycopg.connect(dsn.render_as_string(hide_password=False), autocommit=True) as conn:
        verb = "DROP DATABASE IF EXISTS {}" if drop else "CREATE DATABASE {}"
        conn.execute(sql.SQL(verb).format(sql.Identifier(name)))


def wait_for_tick(ticks: Path, procs: dict[str, subprocess.Popen[bytes]]) -> dict[str, str]:
    """Poll until the worker wrote a tick (bounded), failing early if a process died."""
    deadline = time.monotonic() + TICK_DEADLINE_S
    while time.monotonic() < deadline:
        if ticks.exists() and ticks.read_text().strip():
            row: dict[str, str] = json.loads(ticks.read_text().splitlines()[0])
            return row
        dead = [label for label, proc in procs.items() if proc.poll() is not None]
        if dead:
            raise RuntimeError(f"{', '.join(dead)} exited before a tick ran")
        time.sleep(0.2)
    raise RuntimeError(f"no tick executed within {TICK_DEADLINE_S:.0f} s")


def one_tick(work: Path, bindir: Path, store_url: str) -> dict[str, str]:
    """Beat and worker from the fresh venv, in a folder outside the checkout, until one tick."""
    app_dir = work / "app"
    app_dir.mkdir()
    (app_dir / "wheelapp.py").write_text(APP)
    redis_url = make_url(os.environ.get("DURABLE_BEAT_TEST_REDIS", "redis://127.0.0.1:6379/0"))
    broker = redis_url.set(database=os.environ.get("DURABLE_BEAT_WHEEL_REDIS_DB", "13"))
    queue = f"wheel-check-{uuid.uuid4().hex[:12]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(
        WHEEL_BROKER=broker.render_as_string(hide_password=False),
        WHEEL_QUEUE=queue,
        WHEEL_STORE=store_url,
        WHEEL_TICKS=str(work / "ticks.jsonl"),
        PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}",
    )
    env.pop("DURABLE_BEAT_URL", None)
    celery = [str(bindir / "celery"), "-A", "wheelapp"]
    commands = {
        "worker": [
            *celery,
            "worker",
            "-P",
            "solo",
            "-Q",
            queue,
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "INFO",
        ],
        "beat": [*celery, "beat", "-S", "celery_durable_beat.Scheduler", "-l", "INFO"],
    }
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for label, cmd in commands.items():
            log = (work / f"{label}.log").open("wb")
            procs[label] = subprocess.Popen(  # noqa: S603 - the venv's own celery
                cmd, cwd=app_dir, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        return wait_for_tick(work / "ticks.jsonl", procs)
    except RuntimeError as problem:
        for label in commands:
            log_text = (work / f"{label}.log").read_text(errors="replace")
            sys.stderr.write(f"--- {label} (last lines)\n{log_text[-3000:]}\n")
        raise SystemExit(f"wheel check: {problem}") from None
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


def main() -> None:
    """Build, install, tick; print one line with what ran and how long it took."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    options = parser.parse_args()
    pg = make_url(
        os.environ.get("DURABLE_BEAT_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1/test")
    )
    database = f"wheel_check_{uuid.uuid4().hex[:12]}"
    work = Path(tempfile.mkdtemp(prefix="wheel-check-"))
    marks = [time.monotonic()]
    try:
        creating = start_venv(work)
        wheel = build_wheel(work)
        marks.append(time.monotonic())
        bindir = install_venv(work, wheel, creating)
        marks.append(time.monotonic())
        fresh_database(pg, database)
        try:
            store = pg.set(database=database).render_as_string(hide_password=False)
            row = one_tick(work, bindir, store)
        finally:
            fresh_database(pg, database, drop=True)
        marks.append(time.monotonic())
        if not row["package"].startswith(str(work / "venv")) or "@" not in row["id"]:
            raise SystemExit(f"wheel check: the tick ran from the wrong place: {row}")
        build, install, tick = (b - a for a, b in itertools.pairwise(marks))
        print(
            f"wheel check: {wheel.name}[{EXTRAS}] in a new venv ran tick {row['id']} "
            f"in {marks[-1] - marks[0]:.0f} s (build {build:.0f} s, install {install:.0f} s, "
            f"beat and worker to the tick {tick:.0f} s)"
        )
    finally:
        if options.keep:
            print(f"wheel check: kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
