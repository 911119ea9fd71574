"""Human output of ``celery durable-beat``: aligned plain-text tables read at a glance.

Pure functions from the control API's values to lines of text, kept apart from the click
wiring so they can be tested without a store. No colour and no external table library: the
output goes to terminals, pagers and log files alike. Tick instants are shown in the schedule's
own zone with its offset (SPEC §5); record times and task ids in UTC, as Flower shows them.
"""

from __future__ import annotations

from collections.abc import Sequence

from celery_durable_beat.control.views import (
    EventView,
    HistoryPage,
    NextTick,
    ScheduleDetail,
    ScheduleView,
    StatusView,
    TriggerResult,
)
from celery_durable_beat.ids import format_tick_instant

EMPTY = "-"
_GAP = "  "


def table(headers: Sequence[str] | None, rows: Sequence[Sequence[object]]) -> list[str]:
    """Columns padded to their widest cell; the last column is not padded (no trailing blanks)."""
    cells = [[EMPTY if c is None or c == "" else str(c) for c in row] for row in rows]
    if headers is not None:
        cells.insert(0, list(headers))
    if not cells:
        return []
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return [
        _GAP.join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    ]


def duration_ms(ms: int | None) -> str:
    """``350ms``, ``1.2s``, ``4m05s``, ``3h20m``: lags read at a glance."""
    if ms is None:
        return EMPTY
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    seconds = ms // 1000
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def schedules_table(views: Sequence[ScheduleView]) -> list[str]:
    if not views:
        return ["no schedules yet (beat syncs beat_schedule into the store when it starts leading)"]
    headers = ("NAME", "STATE", "SOURCE", "VER", "SCHEDULE", "TZ", "NEXT TICK", "LAST", "TASK")
    rows = [
        (
            v.name,
            v.state,
            v.source,
            v.version,
            v.schedule,
            v.tz,
            v.next_tick,
            v.last_outcome,
            v.task,
        )
        for v in views
    ]
    return table(headers, rows)


def schedule_detail(detail: ScheduleDetail) -> list[str]:
    v = detail.view
    d = v.definition
    last = None
    if v.last_tick_ms is not None:
        last = f"{format_tick_instant(v.last_tick_ms)} ({v.last_outcome or 'no outcome'})"
    rows: list[tuple[str, object]] = [
        ("name", v.name),
        ("task", v.task),
        ("schedule", f"{v.schedule}  =  {detail.description}"),
        ("tz", v.tz),
        ("state", f"{v.state}  (source {v.source}, version {v.version})"),
        ("missed", v.missed if v.missed != "backfill" else f"backfill (max {v.backfill_max})"),
        ("overlap", v.overlap),
        ("jitter", f"{v.jitter:g}s"),
        ("max lateness", EMPTY if d.max_lateness is None else f"{d.max_lateness:g}s"),
        ("last tick", last),
        ("next tick", v.next_tick),
    ]
    if d.description:
        rows.insert(1, ("about", d.description))
    lines = table(None, rows)
    lines.append("")
    lines.extend(next_ticks_table(detail.next, v.tz, state=v.state))
    return lines


_NOT_FIRING = {
    "paused": " (not firing until resumed)",
    "quarantined": " (not firing until resumed)",
    "archived": " (not firing: archived)",
}


def next_ticks_table(ticks: Sequence[NextTick], tz: str, *, state: str = "active") -> list[str]:
    """The occurrences of the spec; a schedule that is not active says it will not fire them."""
    if not ticks:
        return ["no upcoming ticks"]
    title = f"next {len(ticks)} tick{'s' if len(ticks) != 1 else ''}"
    note = _NOT_FIRING.get(state, "")
    return [
        f"{title}{note}:",
        *table((f"TICK ({tz})", "TASK ID"), [(t.tick, t.task_id) for t in ticks]),
    ]


def history_table(page: HistoryPage) -> list[str]:
    if not page.events:
        return ["no events"]
    headers = (
        "RECORDED (UTC)",
        "TICK (UTC)",
        "TRIGGER",
        "OUTCOME",
        "REASON",
        "LAG",
        "RUN",
        "VER",
        "TASK ID",
    )
    lines = table(headers, [_event_row(e) for e in page.events])
    if page.next_cursor:
        lines.append(f"older events: --cursor {page.next_cursor}")
    return lines


def _event_row(event: EventView) -> tuple[object, ...]:
    return (
        event.recorded_at,
        format_tick_instant(event.tick_ms),
        event.trigger,
        event.outcome,
        event.reason,
        duration_ms(event.lag_ms),
        event.run_state,
        event.version,
        event.task_id,
    )


def trigger_line(name: str, result: TriggerResult) -> str:
    if result.created:
        return f"sent a manual run of {name}: task id {result.task_id}"
    return f"not sent: this idempotency key already ran {name} as task id {result.task_id}"


def state_line(verb: str, view: ScheduleView) -> str:
    """``paused nightly``; a resume also says when the next tick is."""
    line = f"{verb} {view.name} (state {view.state})"
    if view.next_tick:
        line += f"; next tick {view.next_tick}"
    return line


def status_lines(status: StatusView) -> list[str]:
    counts = ", ".join(f"{state} {count}" for state, count in status.counts.items())
    return table(
        None,
        [
            ("leader", _leader(status)),
            ("fencing epoch", status.epoch),
            ("schedules", counts),
            ("due now", status.due_backlog),
        ],
    )


def _leader(status: StatusView) -> str:
    expires = status.lease_expires_at
    if status.leader is not None:
        return f"{status.leader} (lease until {expires})" if expires else status.leader
    if status.epoch == 0:
        return "none (no beat has led this store yet)"
    if expires:
        return f"none (the last lease expired at {expires})"
    return "not recorded in the store (a Redis or single-beat lease)"
