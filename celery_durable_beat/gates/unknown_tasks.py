"""What the round learns from the workers (SPEC §4, §6): ticks whose task no worker knows.

``send_task`` by name cannot tell whether any worker has the task, so a misspelt task would be
published forever. A worker that receives such a tick records its run state ``unknown_task``
(``worker/hooks._on_unknown``, from Celery's ``task_unknown``). Once per round
(``Gate.begin_round``), the round gate asks ``UnknownTaskWatch`` which of the due schedules'
previous tick (``last_tick_ms``: the newest tick the round fired) ended so: one primary-key query
for the whole batch, through the runs port, whatever the schedules' overlap. Each such schedule
counts one more own-fault failure in a row; the K-th quarantines it instead of publishing again
(``durable_beat_quarantine_after``). Any other previous tick resets the streak, including one no
worker has received yet when the next is due: a worker backlog can delay a quarantine, never
cause one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.logs import cause, log_extra
from celery_durable_beat.model import Action
from celery_durable_beat.runs.base import RunState, RunTracking
from celery_durable_beat.store.base import DueSchedule

log = logging.getLogger("celery_durable_beat.gates.unknown_tasks")


class UnknownTaskWatch:
    """``watch(schedules) -> ids of schedules whose previous tick no worker knew``."""

    def __init__(self, tracking: RunTracking) -> None:
        self.tracking = tracking

    def __call__(self, schedules: Sequence[DueSchedule]) -> set[int]:
        previous = {
            tick_task_id(due.name, due.last_tick_ms, due.namespace): due.id
            for due in schedules
            if due.last_tick_ms is not None
        }
        if not previous:
            return set()
        try:
            states = self.tracking.states(list(previous))
        except self.tracking.errors as exc:  # the round goes on; the next one reads again
            log.warning(
                "run states not read (%s); unknown tasks are counted next round",
                cause(exc),
                extra=log_extra(Action.RUN_TRACKING_UNAVAILABLE),
            )
            return set()
        return {
            previous[task_id] for task_id, state in states.items() if state is RunState.UNKNOWN_TASK
        }
