"""The one gate the round calls (``gates/base.Gate``): beat's decisions on one run tracking.

``RoundGate`` composes the four decisions, each in its own module, on the runs port that
``wiring.make_gate`` builds once (one store engine, one Redis client for the claims kept apart;
both connect on first use only, and ``close`` releases them):

- ``begin_round``: the previous ticks no worker knew (``unknown_tasks.py``, one read for the
  batch), then the failing streaks of the schedules with ``pause_on_failure``
  (``failing_streaks.py``, none read when no schedule sets it);
- ``before_publish``: ``require_worker`` first (``live_queues.py``, the live workers read at most
  once per round), then ``overlap`` (``overlap.py``) — in that order, so a tick held for want of
  a worker never counts as let through, and never displaces a previous run;
- ``after_settle``: the revokes ``replace`` left for the ticks now recorded ``enqueued``, and the
  ticks published without a record, which ``overlap`` keeps as previous ticks (rule 7).

It is always built (schedules can gain ``overlap`` or ``require_worker`` at any time through the
API), and costs nothing for a schedule with none of the gated keys.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

from celery_durable_beat.gates.base import NOTHING_LEARNT, PreviousRuns
from celery_durable_beat.gates.failing_streaks import FailedRunsWatch
from celery_durable_beat.gates.live_queues import QueueWatch
from celery_durable_beat.gates.overlap import OverlapGate
from celery_durable_beat.gates.unknown_tasks import UnknownTaskWatch
from celery_durable_beat.message import TickMessage
from celery_durable_beat.model import Reason
from celery_durable_beat.runs.base import Runs
from celery_durable_beat.settings import Settings
from celery_durable_beat.store.base import DueSchedule


class RoundGate:
    """The round's ``Gate``: overlap, unknown tasks, failing streaks and live queues."""

    def __init__(self, app: Any, settings: Settings, runs: Runs) -> None:
        self.runs = runs
        self.overlap = OverlapGate(app, settings, runs)
        self.unknown_tasks = UnknownTaskWatch(runs.tracking)
        self.failing_streaks = FailedRunsWatch(runs.tracking)
        self.live_queues = QueueWatch(app, runs.tracking, settings.worker_ttl)
        self._has_worker: Callable[[TickMessage], bool] | None = None

    def begin_round(self, schedules: Sequence[DueSchedule], now_ms: int) -> PreviousRuns:
        self._has_worker = None  # the live workers are read again, if this round needs them
        self.overlap.begin(now_ms)
        if not schedules:
            return NOTHING_LEARNT
        unknown = self.unknown_tasks(schedules)
        wanted = [due for due in schedules if due.definition.pause_on_failure]
        failing = self.failing_streaks(wanted) if wanted else set()
        return PreviousRuns(unknown_task=frozenset(unknown), failing=frozenset(failing))

    def before_publish(self, due: DueSchedule, message: TickMessage) -> Reason | None:
        if due.definition.require_worker and not self._worker_for(message):
            return Reason.NO_WORKER
        return self.overlap(due, message)

    def after_settle(self, enqueued: Collection[str], published: Collection[str] = ()) -> None:
        self.overlap.flush(enqueued, published)

    def close(self) -> None:
        """Release the run tracking's pool and the claims' client; idempotent."""
        self.runs.close()

    def _worker_for(self, message: TickMessage) -> bool:
        """Whether a live worker consumes the tick's queue; read once per round, when needed."""
        if self._has_worker is None:
            self._has_worker = self.live_queues()
        return self._has_worker(message)
