"""Warm shutdown of a prefork worker draining ticks: how long SIGTERM takes, what it leaves.

SPEC §6: a guarded worker ends within 5 s after its running tasks finish, every time, and leaves
no message of a tick that ran unacknowledged. Each trial (``tests/support/shutdown_trial.py``)
publishes ~1,000 tick messages of a 20 ms ``acks_late`` task, starts
``celery worker -P prefork -c 2 -l WARNING`` (Celery's defaults otherwise; Redis broker), sends
SIGTERM once a random number of them has run (seeded), and records the seconds to exit, the
seconds from the last task's end to exit, and the already-run messages left in the queue or in
kombu's unacked hash.

    flock /work/wt/heavy.lock .venv/bin/python bench/warm_shutdown.py --trials 30 --both
    .venv/bin/python bench/warm_shutdown.py --trials 5 --plain --seed 7 --out /tmp/ws.jsonl

Redis from ``DURABLE_BEAT_TEST_REDIS`` (its database is flushed every trial), PostgreSQL (run
states of the guarded worker, a throwaway database per trial) from ``DURABLE_BEAT_TEST_PG``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

from pgdb import drop_db, make_db

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.rig import ensure_schema  # noqa: E402
from tests.support.shutdown_trial import Trial, run_trial  # noqa: E402

PG = os.environ.get("DURABLE_BEAT_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("DURABLE_BEAT_TEST_REDIS", "redis://127.0.0.1:6379/14")
LIMIT_S = 5.0


def one(guarded: bool, term_after: int, ticks: int, log: Path | None) -> Trial:
    store = make_db(PG) if guarded else None
    try:
        if store:
            ensure_schema(store)
        return run_trial(
            REDIS, guarded=guarded, term_after=term_after, ticks=ticks, store=store, log=log
        )
    finally:
        if store:
            drop_db(PG, store)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(label: str, trials: list[Trial]) -> str:
    exits = [t.exit_s for t in trials]
    after = [t.after_last_end_s for t in trials]
    over = sum(1 for t in trials if t.after_last_end_s > LIMIT_S or t.exitcode is None)
    unacked = sum(1 for t in trials if t.ran_unacked)
    return (
        f"| {label} | {len(trials)} | {statistics.median(exits):.2f} | {pct(exits, 0.95):.2f} "
        f"| {max(exits):.2f} | {max(after):.2f} | {over} | {unacked} "
        f"({sum(t.ran_unacked for t in trials)} msgs) |"
    )


def version() -> str:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import celery, billiard, kombu; "
            "print(celery.__version__, billiard.__version__, kombu.__version__)",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    variant = parser.add_mutually_exclusive_group()
    variant.add_argument("--guarded", action="store_true", help="install(app) only")
    variant.add_argument("--plain", action="store_true", help="plain Celery only")
    variant.add_argument("--both", action="store_true", help="both, alternating (default)")
    parser.add_argument("--trials", type=int, default=30, help="trials per variant")
    parser.add_argument("--ticks", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=24)
    parser.add_argument("--label", default="", help="a prefix for the table's rows")
    parser.add_argument("--out", type=Path, help="one JSON line per trial")
    parser.add_argument("--log", type=Path, help="the workers' output, appended")
    args = parser.parse_args()
    variants = [True] if args.guarded else [False] if args.plain else [False, True]
    rng = random.Random(args.seed)
    print(
        f"celery/billiard/kombu {version()}; seed {args.seed}; {args.ticks} ticks; "
        f"load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    results: dict[bool, list[Trial]] = {v: [] for v in variants}
    for n in range(args.trials):
        term_after = rng.randrange(20, int(args.ticks * 0.9))
        for guarded in variants:
            trial = one(guarded, term_after, args.ticks, args.log)
            results[guarded].append(trial)
            row = {"trial": n, "seed": args.seed, **trial.as_row()}
            print(json.dumps(row), flush=True)
            if args.out:
                with args.out.open("a") as f:
                    f.write(json.dumps(row) + "\n")
    print(f"load {os.getloadavg()[0]:.2f} at the end")
    print(
        "| variant | trials | exit after SIGTERM p50 (s) | p95 | max | exit after last task "
        "end, max (s) | trials over 5 s | trials with run messages unacked |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for guarded, trials in results.items():
        name = "install(app)" if guarded else "plain Celery"
        print(summary(f"{args.label}{name}", trials))
    return 0


if __name__ == "__main__":
    sys.exit(main())
