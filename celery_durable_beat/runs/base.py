"""The runs port (SPEC §6): dedup claims and run tracking, one shape for every backend.

The worker guard claims a tick before its task runs, records how the run ends, and the beat's
overlap gate reads the previous tick's run. Backends: ``runs/sql.py`` (the store's
``durable_beat_runs`` table) and ``runs/redis.py`` (one key per task id).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol


class RunState(str, Enum):
    """What the worker side knows of one tick's run (``run_state`` in history, SPEC §8)."""

    STARTED = "started"
    RETRIED = "retried"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REVOKED = "revoked"
    UNKNOWN = "unknown"


FINAL_RUN_STATES = frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.REVOKED})
"""A run in one of these states is finished: it never blocks overlap and is never run again."""


class WriteIf(str, Enum):
    """When a run-state write replaces the state already stored for that tick."""

    ALWAYS = "always"
    OWNER = "owner"
    """Only if the row is absent or still held by the same owner (the run that writes)."""
    UNFINISHED = "unfinished"
    """Only if the row exists and is not finished (the worker's main process, which does not
    know the owner: hard time limits and lost pool processes)."""


@dataclass(frozen=True)
class RunKey:
    """Which tick a run belongs to: its task id and where it came from."""

    task_id: str
    schedule: str
    tick_ms: int
    trigger: str


@dataclass(frozen=True)
class RunWrite:
    """One run-state write; the row stops counting ``keep_ms`` after the store's now."""

    key: RunKey
    state: RunState
    owner: str
    keep_ms: int
    write_if: WriteIf = WriteIf.OWNER


@dataclass(frozen=True)
class RunRecord:
    """A row of the runs table as read back."""

    task_id: str
    schedule_key: str
    tick_ms: int
    trigger: str
    state: RunState
    owner: str | None
    updated_at_ms: int
    expires_at_ms: int | None


@dataclass(frozen=True)
class PreviousTick:
    """The newest automatic tick of a schedule enqueued before a given one, and its run."""

    task_id: str
    tick_ms: int
    enqueued_at_ms: int
    state: RunState | None
    expires_at_ms: int | None
    now_ms: int


class RunStore(Protocol):
    """Run tracking and the store-backed dedup claim, on the store's ``durable_beat_runs`` table.

    Rules (held by ``tests/integration/test_worker.py``):

    1. **Claim.** ``claim`` writes ``started`` for a tick if it has no row, if its row expired
       (``expires_at_ms`` before the store's now: a lost run, or a finished one past the dedup
       window), or if the row is ``retried`` and the delivery is a retry (``retries > 0``). It
       is atomic: of concurrent claims of one task id exactly one succeeds. Otherwise nothing
       changes and the stored state is returned.
    2. **Writes** follow ``WriteIf`` and set ``expires_at_ms`` to the store's now + ``keep_ms``.
    3. **Heartbeat** pushes ``expires_at_ms`` of ``started`` rows still held by their owner.
    4. **Time** is the store's clock, as for the round.
    """

    def claim(self, key: RunKey, owner: str, retries: int, ttl_ms: int) -> RunState | None:
        """None if this delivery now holds the tick; else the state that refused it."""

    def write(self, writes: Sequence[RunWrite]) -> None:
        """Apply run-state writes (rule 2), in order, in one transaction."""

    def heartbeat(self, held: Sequence[tuple[str, str]], ttl_ms: int) -> None:
        """Refresh the expiry of each (task id, owner) still ``started`` (rule 3)."""

    def mark_revoked(self, key: RunKey, owner: str, keep_ms: int) -> bool:
        """Record ``revoked`` for a tick that has not started (no row, or ``retried``, or
        expired): a delivery of it is then refused. True if recorded."""

    def get_run(self, task_id: str) -> RunRecord | None:
        """The run row of a task id."""

    def previous_tick(self, schedule: str, before_tick_ms: int) -> PreviousTick | None:
        """The newest ``enqueued`` automatic tick of ``schedule`` before ``before_tick_ms``."""

    def prune_runs(self, limit: int) -> int:
        """Delete up to ``limit`` expired rows whose ``enqueued`` record is gone."""

    def close(self) -> None:
        """Release connections; idempotent."""
