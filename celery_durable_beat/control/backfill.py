"""Backfill on demand (``DurableBeat.backfill``, SPEC §15): a past window's missing ticks.

- **Only what never ran.** Every occurrence in ``[start, end]`` (within the schedule's own
  ``start_at``/``end_at``) whose task id — the id its automatic tick has or would have had,
  ``ids.tick_task_id`` — has no ``enqueued`` record is published, oldest first, with trigger
  ``backfill``; the ones recorded ``enqueued`` are counted and left alone. A copy that slips
  through anyway (a tick still in flight) carries the tick's own id, which the worker guard
  refuses.
- **Bounded.** At most ``BACKFILL_MAX`` occurrences per call: a larger window is refused with
  its count (counted without enumeration for intervals, up to ``COUNT_CAP`` for cron).
- **History must be able to prove what ran.** Once a schedule's history may have been pruned
  (it keeps ``durable_beat_history_keep`` records or more), a window whose first occurrence is
  older than the oldest retained record is refused naming that record's instant: a pruned
  record proves nothing, and guessing would run a tick twice. A schedule that kept fewer
  records was never pruned, so a window before it existed is fine.
- **Past only.** A window ending after the store's now is refused: a future tick is the
  automatic one's to run.
- **Outside the fence,** like a manual run (``AdminStore`` rule 10): it moves no schedule, and
  an automatic tick of the same occurrence racing it dedups by task id (rule 3).
"""

from __future__ import annotations

from collections.abc import Sequence

from celery_durable_beat.control.lookups import refuse_archived, refuse_unplannable
from celery_durable_beat.control.manual import published_event
from celery_durable_beat.control.views import BackfillResult, BackfillTick
from celery_durable_beat.exceptions import InvalidArgument, PublishFailed
from celery_durable_beat.ids import format_tick_instant, tick_task_id
from celery_durable_beat.message import build_message
from celery_durable_beat.model import Definition, Trigger
from celery_durable_beat.publish.base import Publisher
from celery_durable_beat.schedules.occurrences import count_ticks, next_tick
from celery_durable_beat.schedules.spec import IntervalSpec
from celery_durable_beat.signals import recorded
from celery_durable_beat.store.base import ControlStore, ScheduleRecord

BACKFILL_MAX = 1000
"""Most occurrences one backfill call may cover (SPEC §15)."""
COUNT_CAP = 10_000
"""How far a cron window over ``BACKFILL_MAX`` is counted before saying "more than"."""
CONFIRM_EVERY = 100
"""Ticks published between broker confirms; each confirmed batch is recorded at once."""


def plan_backfill(
    store: ControlStore,
    record: ScheduleRecord,
    start_ms: int,
    end_ms: int,
    keep: int,
    keep_setting: str = "durable_beat_history_keep",
) -> BackfillResult:
    """What a backfill of ``[start_ms, end_ms]`` publishes (dry: would), refusals first;
    ``keep_setting`` names the history keep as the user wrote it."""
    refuse_archived(record, "backfill")
    refuse_unplannable(record, "backfill")
    if start_ms > end_ms:
        raise InvalidArgument("--from is after --to; give the older instant first", field="from")
    now = store.now_ms()
    if end_ms > now:
        raise InvalidArgument(
            f"--to {format_tick_instant(end_ms)} is in the future (now is "
            f"{format_tick_instant(now)}): backfill covers past ticks; the automatic tick runs "
            "the ones to come",
            field="to",
        )
    ticks = window_ticks(record.definition, start_ms, end_ms)
    refuse_pruned(store, record.name, ticks, keep, keep_setting)
    ids = [tick_task_id(record.name, tick, store.namespace) for tick in ticks]
    done = store.enqueued_among(ids)
    missing = tuple(
        BackfillTick(format_tick_instant(tick), tick, task_id)
        for tick, task_id in zip(ticks, ids, strict=True)
        if task_id not in done
    )
    return BackfillResult(record.name, True, len(ticks), len(ticks) - len(missing), missing)


def window_ticks(definition: Definition, start_ms: int, end_ms: int) -> list[int]:
    """The occurrences in ``[start_ms, end_ms]`` within the schedule's bounds, oldest first;
    InvalidArgument with the count when over ``BACKFILL_MAX``."""
    low = start_ms if definition.start_at_ms is None else max(start_ms, definition.start_at_ms)
    high = end_ms if definition.end_at_ms is None else min(end_ms, definition.end_at_ms)
    timeline = definition.timeline  # excluded dates are not occurrences (SPEC §15)
    ticks: list[int] = []
    tick = next_tick(timeline, low - 1)
    while tick <= high and len(ticks) <= BACKFILL_MAX:
        ticks.append(tick)
        tick = next_tick(timeline, tick)
    if len(ticks) > BACKFILL_MAX:
        raise InvalidArgument(
            f"the window holds {_count(definition, low, high)} occurrences; a backfill covers "
            f"at most {BACKFILL_MAX}: split it into smaller windows",
            field="to",
        )
    return ticks


def _count(definition: Definition, low: int, high: int) -> str:
    spec = definition.timeline
    if isinstance(spec, IntervalSpec):
        return str(count_ticks(spec, low - 1, high))
    count, tick = 0, next_tick(spec, low - 1)
    while tick <= high and count < COUNT_CAP:
        count, tick = count + 1, next_tick(spec, tick)
    return f"more than {COUNT_CAP}" if count >= COUNT_CAP else str(count)


def refuse_pruned(
    store: ControlStore,
    name: str,
    ticks: Sequence[int],
    keep: int,
    keep_setting: str = "durable_beat_history_keep",
) -> None:
    """InvalidArgument naming the oldest retained record when history may have been pruned and
    the window reaches before it (module docstring)."""
    if not ticks:
        return
    count, oldest = store.history_extent(name)
    if count >= keep and oldest is not None and ticks[0] < oldest:
        raise InvalidArgument(
            f'the history of "{name}" was pruned ({keep_setting} = {keep}); the '
            f"oldest record left is of {format_tick_instant(oldest)}, so what ran before it "
            "cannot be proven: start the window at or after that instant",
            field="from",
        )


def publish_backfill(
    store: ControlStore,
    publisher: Publisher,
    record: ScheduleRecord,
    ticks: Sequence[BackfillTick],
    sender: object = None,
) -> None:
    """Publish ``ticks`` oldest first, recording each confirmed batch; PublishFailed (after
    recording the batch ``failed``) when the broker refuses or does not confirm. Each batch
    recorded ``enqueued`` sends ``signals.tick_enqueued`` as ``sender`` (SPEC §17)."""
    messages = [
        build_message(
            record.name,
            record.definition,
            t.tick_ms,
            t.task_id,
            Trigger.BACKFILL,
            namespace=store.namespace,
        )
        for t in ticks
    ]
    with publisher.session() as session:
        for start in range(0, len(messages), CONFIRM_EVERY):
            batch = messages[start : start + CONFIRM_EVERY]
            reason = None
            for message in batch:
                reason = session.publish(message)
                if reason is not None:
                    break
            reason = reason or session.confirm()
            failed = None if reason is None else reason.value
            events = [published_event(record, m, failed) for m in batch]
            store.record_backfill(events)
            if failed is not None:
                raise PublishFailed(record.name, failed, what=f"backfill ({start} sent)")
            recorded(sender, events)
