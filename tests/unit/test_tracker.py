"""Run-state writes committed in the background (``worker/tracker.py``), on the in-memory runs.

The flusher is a real thread, so these tests wait on a deadline poll for what it commits; the
order of a tick's states and the last commit at ``close`` are what must hold.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence

import pytest

from celery_durable_beat.exceptions import StoreUnavailable
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.model import Action
from celery_durable_beat.runs.base import RunKey, Runs, RunState, RunWrite, WriteIf
from celery_durable_beat.runs.memory import MemoryRuns
from celery_durable_beat.settings import Settings
from celery_durable_beat.worker.guard import GuardRuntime
from celery_durable_beat.worker.tracker import CIRCUIT_S, Circuit, Tracker

from ._support import FakeClock

pytestmark = pytest.mark.unit

T0 = 1_780_000_000_000


def key(i: int) -> RunKey:
    return RunKey(
        tick_task_id("Every second", T0 + i * 1000), "Every second", T0 + i * 1000, "auto"
    )


def write(i: int, state: RunState) -> RunWrite:
    return RunWrite(key(i), state, "w:1:abc", 60_000, WriteIf.ALWAYS)


def eventually(check: Callable[[], bool], what: str, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.005)


class Recording(MemoryRuns):
    """Records each committed batch; ``gate`` holds a commit until the test opens it, and
    ``down`` fails it as a store that does not answer."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.batches: list[list[tuple[str, RunState]]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.down = False

    def write(self, writes: Sequence[RunWrite]) -> None:
        self.gate.wait(5)
        if self.down:
            raise StoreUnavailable("the test took it down")
        self.batches.append([(w.key.task_id, w.state) for w in writes])
        super().write(writes)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def tracker_on(runs: Recording, clock: FakeClock) -> Tracker:
    circuit = Circuit("the test store", Action.RUN_TRACKING_UNAVAILABLE, "kept", clock)
    return Tracker(runs, Counter(), circuit, background=True)


def test_a_write_returns_before_the_commit_which_follows_in_the_background(
    clock: FakeClock,
) -> None:
    runs = Recording(clock)
    tracker = tracker_on(runs, clock)
    runs.gate.clear()  # the store is slow: the caller must not wait for it
    tracker.write(write(0, RunState.STARTED))
    assert (
        runs.state(key(0).task_id) is None
    )  # a write in this thread would have waited, then committed
    runs.gate.set()
    eventually(lambda: runs.state(key(0).task_id) is RunState.STARTED, "started committed")
    tracker.close()


def test_writes_made_during_a_slow_commit_go_in_one_commit_and_the_newest_state_wins(
    clock: FakeClock,
) -> None:
    runs = Recording(clock)
    tracker = tracker_on(runs, clock)
    runs.gate.clear()
    tracker.write(write(0, RunState.STARTED))
    eventually(lambda: tracker.pending() == 0, "the first commit under way")
    for i in range(1, 51):  # fifty runs start and end while the first commit waits
        tracker.write(write(i, RunState.STARTED))
        tracker.write(write(i, RunState.SUCCEEDED))
    runs.gate.set()
    eventually(lambda: sum(len(b) for b in runs.batches) == 51, "every tick committed")
    assert len(runs.batches) == 2  # a group commit: one for the fifty, not a hundred
    assert all(state is RunState.SUCCEEDED for _, state in runs.batches[1])
    tracker.close()
    assert tracker.commits == 2


def test_a_ticks_states_are_committed_in_their_order(clock: FakeClock) -> None:
    """Heartbeat and flusher both flush: one at a time, so ``started`` never lands after
    ``succeeded``."""
    runs = Recording(clock)
    tracker = tracker_on(runs, clock)
    for i in range(200):
        tracker.write(write(i, RunState.STARTED))
        if i % 7 == 0:
            tracker.write()  # the heartbeat's flush, in this thread
        tracker.write(write(i, RunState.SUCCEEDED))
    tracker.close()
    assert all(runs.state(key(i).task_id) is RunState.SUCCEEDED for i in range(200))
    seen: dict[str, RunState] = {}
    for batch in runs.batches:
        for task_id, state in batch:
            assert seen.get(task_id) is not RunState.SUCCEEDED, f"{task_id} went back"
            seen[task_id] = state


def test_close_commits_what_is_pending(clock: FakeClock) -> None:
    runs = Recording(clock)
    tracker = tracker_on(runs, clock)
    runs.gate.clear()
    for i in range(10):
        tracker.write(write(i, RunState.SUCCEEDED))
    threading.Timer(0.2, runs.gate.set).start()
    tracker.close()
    assert sum(len(b) for b in runs.batches) == 10
    tracker.write(write(10, RunState.SUCCEEDED))  # after close: written in the caller's thread
    assert runs.state(key(10).task_id) is RunState.SUCCEEDED


def test_a_store_outage_keeps_the_states_until_the_heartbeat_writes_them(
    clock: FakeClock,
) -> None:
    runs = Recording(clock)
    tracker = tracker_on(runs, clock)
    runs.down = True
    tracker.write(write(0, RunState.SUCCEEDED))
    # The flusher opens the circuit, then puts the failed batch back: wait for both.
    eventually(lambda: tracker.circuit.down and tracker.pending() == 1, "the state kept aside")
    assert tracker.counters["tracking_errors"] == 1
    runs.down = False
    clock.sleep(CIRCUIT_S)
    tracker.write()  # the heartbeat
    assert runs.state(key(0).task_id) is RunState.SUCCEEDED
    tracker.close()


def test_the_runtime_writes_in_the_background_only_when_the_claims_are_apart(
    clock: FakeClock,
) -> None:
    settings = Settings(run_ttl=3, dedup_ttl=60)
    apart = GuardRuntime(
        settings,
        Runs(claims=MemoryRuns(clock), tracking=MemoryRuns(clock)),
        clock=clock,
        background_writes=True,
    )
    shared_runs = MemoryRuns(clock)
    shared = GuardRuntime(
        settings,
        Runs(claims=shared_runs, tracking=shared_runs),
        clock=clock,
        background_writes=True,
    )
    assert apart.tracker.background and not shared.tracker.background
    held = apart.enter(key(0), hostname="w", attempt=0, redelivered=False)
    apart.leave(held, RunState.SUCCEEDED)
    apart.close()  # the last commit happens at close at the latest
    assert apart.runs.state(key(0).task_id) is RunState.SUCCEEDED
    shared.close()


def test_writes_kept_together_end_as_their_sequence_would(clock: FakeClock) -> None:
    """A retry's claim (``ALWAYS``, a new owner) and its end (``OWNER``), kept before one commit
    behind the previous run's ``retried``: the end applies, and the older owner's writes stay
    in order before it (merged into one, they would meet the older owner's row and be refused)."""
    runs = MemoryRuns(clock=clock)
    circuit = Circuit("the test store", Action.RUN_TRACKING_UNAVAILABLE, "kept", clock)
    tracker = Tracker(runs, Counter(), circuit)
    k = RunKey("t", "s", 1, "auto")
    tracker.write(RunWrite(k, RunState.STARTED, "first", 60_000, WriteIf.ALWAYS))
    circuit.failed(StoreUnavailable("down"))  # nothing is committed until it answers
    tracker.write(RunWrite(k, RunState.RETRIED, "first", 60_000, WriteIf.OWNER, 1))
    tracker.write(RunWrite(k, RunState.STARTED, "second", 60_000, WriteIf.ALWAYS, 1))
    tracker.write(RunWrite(k, RunState.SUCCEEDED, "second", 60_000, WriteIf.OWNER, 1))
    tracker.write(RunWrite(k, RunState.SUCCEEDED, "first", 60_000, WriteIf.OWNER))  # stale
    assert tracker.pending() == 2
    clock.sleep(CIRCUIT_S)
    tracker.flush()
    record = runs.get_run("t")
    assert record is not None
    assert (record.state, record.owner) == (RunState.SUCCEEDED, "second")


class HoldingTick(Recording):
    """Holds the commits of ``held`` ticks until ``release`` is set; others commit at once."""

    def __init__(self, clock: FakeClock, held: set[str]) -> None:
        super().__init__(clock)
        self.held = held
        self.release = threading.Event()
        self.holding = threading.Event()

    def write(self, writes: Sequence[RunWrite]) -> None:
        if any(w.key.task_id in self.held for w in writes):
            self.holding.set()
            self.release.wait(5)
        super().write(writes)


def in_thread(call: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    return thread


def test_writes_of_other_ticks_in_callers_threads_do_not_wait_for_a_slow_commit(
    clock: FakeClock,
) -> None:
    """The ``threads`` pool: each task thread writes its run's end in its own thread (the store
    holds the claims). One thread's slow commit must not hold up another's end of another tick."""
    runs = HoldingTick(clock, held={key(0).task_id})
    circuit = Circuit("the test store", Action.RUN_TRACKING_UNAVAILABLE, "kept", clock)
    tracker = Tracker(runs, Counter(), circuit)
    slow = in_thread(lambda: tracker.write(write(0, RunState.SUCCEEDED)))
    assert runs.holding.wait(5), "the first commit never started"
    other = in_thread(lambda: tracker.write(write(1, RunState.SUCCEEDED)))
    eventually(lambda: runs.state(key(1).task_id) is RunState.SUCCEEDED, "tick 1 committed")
    assert slow.is_alive() and runs.state(key(0).task_id) is None  # tick 0 is still held
    runs.release.set()
    slow.join(5)
    other.join(5)
    assert runs.state(key(0).task_id) is RunState.SUCCEEDED
    assert tracker.commits == 2


def test_a_ticks_later_write_waits_for_its_earlier_commit(clock: FakeClock) -> None:
    """Two threads write states of one tick: the later commit waits for the earlier one, so the
    tick ends in its later state."""
    runs = HoldingTick(clock, held={key(0).task_id})
    circuit = Circuit("the test store", Action.RUN_TRACKING_UNAVAILABLE, "kept", clock)
    tracker = Tracker(runs, Counter(), circuit)
    first = in_thread(lambda: tracker.write(write(0, RunState.STARTED)))
    assert runs.holding.wait(5), "the first commit never started"
    runs.held = set()  # what follows would commit at once if it did not wait
    later = in_thread(lambda: tracker.write(write(0, RunState.SUCCEEDED)))
    eventually(lambda: tracker.pending() == 0, "the later write taken for its commit")
    assert later.is_alive() and runs.batches == []  # it waits: nothing of tick 0 committed
    runs.release.set()
    first.join(5)
    later.join(5)
    assert runs.batches == [
        [(key(0).task_id, RunState.STARTED)],
        [(key(0).task_id, RunState.SUCCEEDED)],
    ]
    assert runs.state(key(0).task_id) is RunState.SUCCEEDED


def test_a_thread_commits_alone_only_its_own_write(clock: FakeClock) -> None:
    """The one pending write may be another thread's (its own was taken by a flush meanwhile):
    that one is left to ``flush``, so its thread returns only once it is committed."""
    runs = Recording(clock)
    circuit = Circuit("the test store", Action.RUN_TRACKING_UNAVAILABLE, "kept", clock)
    tracker = Tracker(runs, Counter(), circuit)
    tracker._keep(write(1, RunState.SUCCEEDED))  # another thread's, not committed yet
    assert not tracker._flush_alone(write(0, RunState.SUCCEEDED))
    assert tracker.pending() == 1 and runs.batches == []
