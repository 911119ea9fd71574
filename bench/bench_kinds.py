"""Schedule kinds (issue 42): the old kinds' speed before and after, and what the new kinds cost.

Run from the repository root::

    python bench/bench_kinds.py                   # against 0cf30c8, the commit before issue 42
    python bench/bench_kinds.py --before <commit> --pairs 60

Part 1 is a paired comparison, because this machine's speed swings by 2x from minute to minute:
the package as it was at ``--before`` is extracted with ``git archive`` into a temporary folder
under another name (``cdb_before``), so both versions live in one process and are timed in
alternating batches; the figure for a case is the median over the pairs of (after / before).
Cases: ``next_tick`` of two crons and an interval (the calls every round makes per due
schedule), and a whole round of 500 due schedules of each existing kind on ``FrozenBeat``
(parse, plan, audit in the in-memory store, publish to a capturing publisher).

Part 2 times the new kinds against the library each one stands on, measured in the same run:
PyEphem's own ``next_setting`` for a solar event, dateutil's ``rrule.after`` for a rule.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import io
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from celery import Celery  # noqa: E402

START_2026_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
CASES = (("30 2 * * 1-5", "America/New_York"), ("*/5 * * * *", "Europe/Berlin"))
ROUND_SIZE = 500


def load_before(commit: str, into: Path) -> ModuleType:
    """The package at ``commit``, importable as ``cdb_before`` beside the current one."""
    archive = subprocess.run(
        ["git", "archive", commit, "celery_durable_beat"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    (into / "celery_durable_beat").rename(into / "cdb_before")
    for source in (into / "cdb_before").rglob("*.py"):
        text = source.read_text()
        source.write_text(text.replace("celery_durable_beat", "cdb_before"))
    sys.path.insert(0, str(into))
    return importlib.import_module("cdb_before")


def batch_us(
    call: Callable[[int], object], inputs: list[int], per_batch: int, offset: int
) -> float:
    """Mean microseconds of one call over a batch of ``per_batch`` calls."""
    count = len(inputs)
    started = time.perf_counter_ns()
    for i in range(per_batch):
        call(inputs[(offset + i) % count])
    return (time.perf_counter_ns() - started) / per_batch / 1000


def paired(
    before: Callable[[int], object],
    after: Callable[[int], object],
    inputs: list[int],
    pairs: int,
    per_batch: int,
) -> tuple[float, float, float, float, float]:
    """Median after/before ratio over ``pairs`` alternating batches (which goes first alternates
    too), the 10th and 90th percentile ratios, the best batch of each, after over before, and
    the best after batch's microseconds a call."""
    ratios, best_before, best_after = [], float("inf"), float("inf")
    for pair in range(pairs):
        gc.collect()
        offset = pair * per_batch
        if pair % 2:
            a = batch_us(after, inputs, per_batch, offset)
            b = batch_us(before, inputs, per_batch, offset)
        else:
            b = batch_us(before, inputs, per_batch, offset)
            a = batch_us(after, inputs, per_batch, offset)
        ratios.append(a / b)
        best_before, best_after = min(best_before, b), min(best_after, a)
    deciles = statistics.quantiles(ratios, n=10)
    return statistics.median(ratios), deciles[0], deciles[-1], best_after / best_before, best_after


def instants(count: int) -> list[int]:
    """Instants spread over 2026 with odd seconds and milliseconds, DST days included."""
    step = 365 * 86_400_000 // count
    return [START_2026_MS + i * step + (i * 7_919) % 3_600_000 for i in range(count)]


def next_tick_case(package: ModuleType, schedule: str, tz: str) -> Callable[[int], object]:
    schedules = importlib.import_module(f"{package.__name__}.schedules")
    spec = schedules.parse_schedule(schedule, tz).spec
    next_tick = schedules.next_tick
    return lambda at: next_tick(spec, at)


def round_case(package: ModuleType, schedule: str) -> Callable[[int], object]:
    """One ``FrozenBeat`` advance of five minutes: one round with ``ROUND_SIZE`` ticks due."""
    testing = importlib.import_module(f"{package.__name__}.testing")
    app = Celery(f"bench-{package.__name__}", broker="memory://", set_as_current=False)
    app.conf.timezone = "Europe/Berlin"
    app.conf.beat_schedule = {
        f"job-{i}": {"task": "bench.job", "schedule": schedule} for i in range(ROUND_SIZE)
    }
    beat = testing.FrozenBeat(app, "2026-03-02T00:00:00Z")
    beat.advance("5m")  # the first round: every row planned

    def one_round(_: int) -> object:
        ticks = beat.advance("5m")
        assert len(ticks) == ROUND_SIZE, len(ticks)
        beat.publisher.messages.clear()
        return ticks

    return one_round


def part_one(before: ModuleType, after: ModuleType, pairs: int) -> None:
    print(
        f"part 1: after / before, median of {pairs} paired batches (p10-p90), "
        "best after / best before, best after"
    )
    spread = instants(512)
    cases: list[tuple[str, str, str | None, int]] = [
        *((f"next_tick {expr!r} {tz}", expr, tz, 500) for expr, tz in CASES),
        ("next_tick '@every 30s'", "@every 30s", "UTC", 20_000),
    ]
    for label, schedule, tz, per_batch in cases:
        report(
            label,
            paired(
                next_tick_case(before, schedule, tz or "UTC"),
                next_tick_case(after, schedule, tz or "UTC"),
                spread,
                pairs,
                per_batch,
            ),
        )
    for schedule in ("*/5 * * * *", "@every 300s"):
        report(
            f"round of {ROUND_SIZE} due {schedule!r}",
            paired(
                round_case(before, schedule),
                round_case(after, schedule),
                [0],
                max(pairs // 3, 5),
                1,
            ),
        )


def report(label: str, figures: tuple[float, float, float, float, float]) -> None:
    median, low, high, best, after_us = figures
    print(
        f"  {label:<40} {median:6.3f}  ({low:.3f}-{high:.3f})  best {best:.3f}  {after_us:10.1f} µs"
    )


def timed_us(
    call: Callable[[int], object], inputs: list[int], batches: int, per_batch: int
) -> float:
    """Median over ``batches`` of the mean microseconds of one call."""
    samples = []
    for batch in range(batches):
        gc.collect()
        samples.append(batch_us(call, inputs, per_batch, batch * per_batch))
    return statistics.median(samples)


def part_two() -> None:
    import ephem

    from celery_durable_beat.schedules import next_tick, parse_schedule

    print("part 2: the new kinds, median µs of one next tick, beside the library's own call")
    spread = instants(512)
    solar = parse_schedule("@solar sunset 59.437 24.745", "Europe/Tallinn").spec
    cold = [at + i * 86_400_000 * 3 for i, at in enumerate(spread)]  # a new day's window each call
    rows = [
        (
            "solar sunset Tallinn, a new day each call",
            timed_us(lambda at: next_tick(solar, at), cold, 5, 200),
        )
    ]
    warm = [START_2026_MS + 1000 * i for i in range(512)]  # one day: its window reused
    rows.append(
        (
            "solar sunset Tallinn, the same day again",
            timed_us(lambda at: next_tick(solar, at), warm, 5, 2000),
        )
    )
    observer = ephem.Observer()
    observer.lat, observer.lon, observer.horizon, observer.pressure = "59.437", "24.745", "-0:34", 0
    sun = ephem.Sun()

    def pyephem(at: int) -> object:
        observer.date = ephem.Date(datetime.fromtimestamp(at / 1000, timezone.utc))
        return observer.next_setting(sun)

    rows.append(("  PyEphem next_setting alone (reference)", timed_us(pyephem, cold, 5, 200)))
    for text, dtstart, calls in (
        ("RRULE:FREQ=MONTHLY;BYDAY=-1FR;BYHOUR=9;BYMINUTE=0;BYSECOND=0", datetime(1973, 1, 1), 8),
        ("RRULE:FREQ=MINUTELY", datetime(2016, 12, 1), 1),  # dateutil: seconds a call
    ):
        rows += rrule_rows(text, dtstart, calls, spread)
    for label, cost in rows:
        print(f"  {label:<54} {cost:12.1f}")


def rrule_rows(
    text: str, dtstart: datetime, calls: int, spread: list[int]
) -> list[tuple[str, float]]:
    """Our next tick of a rule, and dateutil's ``after`` on the same rule from its DTSTART."""
    from dateutil import rrule

    from celery_durable_beat.schedules import next_tick, parse_schedule

    spec = parse_schedule(f"DTSTART:{dtstart:%Y%m%dT%H%M%S}\n{text}", "Europe/Berlin").spec
    ours = timed_us(lambda at: next_tick(spec, at), spread, 5, 200)
    reference = rrule.rrulestr(text, dtstart=dtstart)
    naive = [datetime.fromtimestamp(at / 1000) for at in spread[:8]]
    theirs = timed_us(lambda i: reference.after(naive[i]), list(range(8)), 1, calls)
    return [
        (f"rrule {text[6:40]}, DTSTART {dtstart:%Y}", ours),
        ("  dateutil rrule.after from DTSTART (reference)", theirs),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="0cf30c8", help="the commit to compare with")
    parser.add_argument("--pairs", type=int, default=60, help="paired batches a case")
    args = parser.parse_args()
    import celery_durable_beat as after

    with tempfile.TemporaryDirectory() as folder:
        before = load_before(args.before, Path(folder))
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            check=True,
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
        print(
            f"before {args.before}, after {head} (with any uncommitted changes), "
            f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC"
        )
        part_one(before, after, args.pairs)
    part_two()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
