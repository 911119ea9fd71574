"""The one port between the leader's round and beat's gates (SPEC §2, §4, §6).

A gate is what the round asks around a publish, beyond the schedule row itself: what the
workers reported of the previous runs, whether a tick may go out now, and what follows once the
round's records are committed. The round (``dispatch.py``) knows only this module; the gates
themselves (``gates/overlap.py``, ``unknown_tasks.py``, ``failing_streaks.py``,
``live_queues.py``) are composed into one by ``gates/round_gate.py`` and built once in
``wiring.make_gate``. ``OPEN_GATE`` lets everything through and reads nothing: the round of the
in-memory ``FrozenBeat`` and of unit tests that need no run tracking.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from celery_durable_beat.message import TickMessage
from celery_durable_beat.model import Reason
from celery_durable_beat.store.base import DueSchedule


@dataclass(frozen=True)
class PreviousRuns:
    """What a round learnt from the workers about its due schedules' previous runs, by id."""

    unknown_task: frozenset[int] = field(default_factory=frozenset)
    """Schedules whose previous tick no worker knew: one more own-fault failure in a row."""
    failing: frozenset[int] = field(default_factory=frozenset)
    """``pause_on_failure`` schedules whose last N runs failed: paused instead of fired."""


class Gate(Protocol):
    """Beat's decisions around a publish, called by the round on its own thread.

    The contract, as testable rules:

    1. ``begin_round(schedules, now_ms)`` is called once per round that claimed schedules, with
       the schedules the round could plan and the round's now (the store's clock), before any of
       their ticks is offered. It reads what the whole batch needs before any publish — the
       previous ticks' run states in one read, a failing streak only for a schedule that sets
       ``pause_on_failure`` — and nothing when no schedule needs it.
    2. ``begin_round`` never raises for an unreadable run tracking: what it could not read is
       left out of its answer (logged, ``run_tracking_unavailable``) and the next round reads
       again. It starts the round's state afresh: nothing read in an earlier round is reused.
    3. ``before_publish(due, message)`` is called for each tick the round would publish, in tick
       order, every tick of one schedule consecutively with the same ``due`` object; it answers
       None (publish it) or the stable ``Reason`` it is skipped for. A schedule with none of the
       gated keys (``overlap: allow``, no ``require_worker``) is answered without a read; the
       live workers are read at most once per round, for the first tick that needs them.
    4. A tick let through may leave follow-up work (``replace``'s revokes); it is done only in
       ``after_settle(enqueued)``, called once per round after the round's records committed,
       and only for ticks whose task id is in ``enqueued`` (recorded ``enqueued``: publish
       confirmed, record committed). A round that failed calls it with nothing: the follow-up
       work of that round is forgotten, never done later.
    5. ``after_settle`` never raises for a store, broker or tracking failure: each failed step is
       logged (``revoke_failed``) and the next round decides again.
    6. ``close()`` releases what the gate holds (the run tracking's pool, the claims' client);
       idempotent, and nothing connects before first use.
    7. ``after_settle(enqueued, published)`` also names every tick of the round whose publish the
       broker confirmed, recorded or not, on the round's success and on its failure alike. A
       tick in ``published`` but not in ``enqueued`` went out without its record (the round
       failed after its publish: fenced, the store gone, the settle cut off): it may run, and
       no audit record says so, so the gate keeps it (the one thing kept from earlier rounds) as
       its schedule's previous tick for ``overlap`` until it ends or a newer tick is recorded.
    """

    def begin_round(self, schedules: Sequence[DueSchedule], now_ms: int) -> PreviousRuns:
        """Learn, in one batched read, what this round needs of the schedules' previous runs."""

    def before_publish(self, due: DueSchedule, message: TickMessage) -> Reason | None:
        """None to publish ``message`` now, else the reason it is skipped."""

    def after_settle(self, enqueued: Collection[str], published: Collection[str] = ()) -> None:
        """Do the follow-up work of the ticks now recorded ``enqueued``; forget the rest, except
        the ticks ``published`` without a record (rule 7)."""

    def close(self) -> None:
        """Release the gate's connections; idempotent."""


class OpenGate:
    """The gate that lets every tick through and reads nothing (no run tracking wired)."""

    def begin_round(self, schedules: Sequence[DueSchedule], now_ms: int) -> PreviousRuns:
        return NOTHING_LEARNT

    def before_publish(self, due: DueSchedule, message: TickMessage) -> Reason | None:
        return None

    def after_settle(self, enqueued: Collection[str], published: Collection[str] = ()) -> None:
        return None

    def close(self) -> None:
        return None


NOTHING_LEARNT = PreviousRuns()
OPEN_GATE: Gate = OpenGate()
