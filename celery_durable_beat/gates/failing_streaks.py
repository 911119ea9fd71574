"""What the round learns from the workers for ``pause_on_failure`` (SPEC §2): failing streaks.

A schedule with ``pause_on_failure: N`` is paused (reason ``failures``) when the run of each of
its N newest automatic ticks ended ``failed``. Run states are final states the workers recorded
(``worker/hooks.py``): a retry that later succeeds ends ``succeeded`` and breaks the streak, as
does a run still going. Only ticks at or after the schedule's ``streak_from_ms`` count — set
whenever it is planned from now (created, changed, resumed) — so ``resume`` clears the count.

Read once per round (``Gate.begin_round``), only for due schedules that set the key: one indexed
query each, on the runs port.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from celery_durable_beat.logs import cause, log_extra
from celery_durable_beat.model import Action
from celery_durable_beat.runs.base import RunState, RunTracking
from celery_durable_beat.store.base import DueSchedule

log = logging.getLogger("celery_durable_beat.gates.failing_streaks")


class FailedRunsWatch:
    """``watch(schedules) -> ids of schedules whose last N runs failed``."""

    def __init__(self, tracking: RunTracking) -> None:
        self.tracking = tracking

    def __call__(self, schedules: Sequence[DueSchedule]) -> set[int]:
        failing: set[int] = set()
        for due in schedules:
            wanted = due.definition.pause_on_failure
            if not wanted:
                continue
            try:
                states = self.tracking.recent_states(due.name, due.streak_from_ms, wanted)
            except self.tracking.errors as exc:  # the next round reads again
                log.warning(
                    "run states not read (%s); failing streaks are counted next round",
                    cause(exc),
                    extra=log_extra(Action.RUN_TRACKING_UNAVAILABLE),
                )
                return failing
            if len(states) == wanted and all(s is RunState.FAILED for s in states):
                failing.add(due.id)
        return failing
