"""What the enqueue hooks (``celery_durable_beat.signals``, SPEC §17) cost a burst of 10k ticks.

Run from the repository root::

    python bench/bench_hooks.py            # the table and one JSON line
    python bench/bench_hooks.py --quick    # fewer bursts, for a smoke run

In one process, alternating so a noisy machine slows every variant alike: a burst of 10,000 due
ticks (rounds of 500, ``burst.BurstRounds``) on the in-memory store with a capturing publisher
(no I/O: the round's own CPU is all there is to see), run

1. with no hook at all (``on_recorded=None``: the round as it was before the hooks; the only
   line the hooks added to ``dispatch.py`` is one ``is not None`` test per round);
2. with the hooks wired as beat wires them (``RoundSignals``) and no receiver connected;
3. with one receiver of ``tick_enqueued`` connected (what a receiver costs the round).

Each figure is the median (and the min) CPU time of a burst (``time.process_time``); the ratio of
(2) to (1) is the figure that matters and should be 1.00 within the noise. Last, the hook's own
cost with nothing connected is timed directly: one call with a round's 500 records.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import timeit
from typing import Any

from celery_durable_beat.burst import BurstRounds
from celery_durable_beat.dispatch import Dispatcher, Recorded
from celery_durable_beat.model import Outcome, Trigger
from celery_durable_beat.publish.capturing import CapturingPublisher
from celery_durable_beat.schedules.validate import validate_entries
from celery_durable_beat.signals import RoundSignals, tick_enqueued
from celery_durable_beat.store.base import AuditEvent
from celery_durable_beat.store.memory import MemoryStore
from celery_durable_beat.sync import sync_definitions

T0 = 1_780_000_020_000  # a whole minute
TICKS = 10_000
BATCH = 500


def burst(definitions: list[Any], hook: Recorded | None) -> float:
    """CPU seconds of one burst of ``TICKS`` due ticks."""
    now = [T0]
    store = MemoryStore(clock=lambda: now[0])
    store.register_epoch(1)
    sync_definitions(store, definitions, T0)
    dispatcher = Dispatcher(store, CapturingPublisher(), batch_size=BATCH, on_recorded=hook)
    now[0] = T0 + 60_000
    started = time.process_time()
    stats = BurstRounds(dispatcher, lambda: now[0]).run(now[0], 1, lambda: True)
    took = time.process_time() - started
    assert stats.outcomes()["enqueued"] == TICKS, stats.outcomes()
    return took


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="5 bursts each instead of 15")
    options = parser.parse_args()
    repeats = 5 if options.quick else 15
    entries = {f"s{i:05d}": {"task": "t", "schedule": "@every 60s"} for i in range(TICKS)}
    definitions = validate_entries(entries)
    heard: list[str] = []

    def receiver(sender: object, task_id: str, **_: Any) -> None:
        heard.append(task_id)

    runs: dict[str, list[float]] = {"no hook": [], "hooks, no receiver": [], "one receiver": []}
    for _ in range(repeats):
        runs["no hook"].append(burst(definitions, None))
        runs["hooks, no receiver"].append(burst(definitions, RoundSignals()))
        tick_enqueued.connect(receiver, weak=False)
        try:
            runs["one receiver"].append(burst(definitions, RoundSignals()))
        finally:
            tick_enqueued.disconnect(receiver)
    assert len(heard) == repeats * TICKS
    report: dict[str, Any] = {"ticks": TICKS, "bursts": repeats}
    print(f"a burst of {TICKS} ticks, CPU time, {repeats} bursts each (alternating):")
    for name, samples in runs.items():
        median, low = statistics.median(samples), min(samples)
        report[name] = {"median_ms": median * 1000, "min_ms": low * 1000}
        print(f"  {name:20s} median {median * 1000:7.1f} ms   min {low * 1000:7.1f} ms")
    base = statistics.median(runs["no hook"])
    report["ratio_no_receiver"] = statistics.median(runs["hooks, no receiver"]) / base
    report["ratio_one_receiver"] = statistics.median(runs["one receiver"]) / base
    print(
        f"  ratio to no hook: no receiver {report['ratio_no_receiver']:.3f}, "
        f"one receiver {report['ratio_one_receiver']:.3f}"
    )
    events = [AuditEvent("s", T0, "s@x", Trigger.AUTO, Outcome.ENQUEUED)] * BATCH
    hook = RoundSignals()
    calls = 200_000
    per_round_ns = timeit.timeit(lambda: hook(events), number=calls) / calls * 1e9
    report["hook_ns_per_round_no_receiver"] = per_round_ns
    print(f"  the hook itself, nothing connected: {per_round_ns:.0f} ns per round of {BATCH}")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
