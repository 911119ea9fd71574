"""Human output of ``celery durable-beat``: aligned plain-text tables read at a glance.

Pure functions from the control API's values to lines of text, kept apart from the click
wiring so they can be tested without a store. No colour and no external table library: the
output goes to terminals, pagers and log files alike. Tick instants are shown in the schedule's
own zone with its offset (SPEC §5); record times and task ids in UTC, as Flower shows them.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence

from celery_durable_beat.control import views
from celery_durable_beat.control.shown import seconds_problem
from celery_durable_beat.ids import format_tick_instant

EMPTY = "-"
_GAP = "  "


def table(headers: Sequence[str] | None, rows: Sequence[Sequence[object]]) -> list[str]:
    """Columns padded to their widest cell; the last column is not padded (no trailing blanks)."""
    cells = [[EMPTY if c is None or c == "" else printable(str(c)) for c in row] for row in rows]
    if headers is not None:
        cells.insert(0, list(headers))
    if not cells:
        return []
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return [
        _GAP.join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    ]


def printable(text: str) -> str:
    """``text`` with each control character escaped (``\\n``, ``\\x00``): a stored name with a
    newline must not start a line of its own in a table (SPEC §2 bounds refuse it; an older
    version may have stored it)."""
    if not any(unicodedata.category(char) == "Cc" for char in text):
        return text
    return "".join(
        repr(char)[1:-1] if unicodedata.category(char) == "Cc" else char for char in text
    )


def invalid_lines(view: views.ScheduleView) -> list[str]:
    """``invalid: start_at: the instant … lies outside the years 1900-9999``, one per field
    whose stored value could not be shown (``control/shown.py``)."""
    return [f"invalid: {p.field}: {printable(p.problem)}" for p in view.invalid]


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


def schedules_table(views: Sequence[views.ScheduleView]) -> list[str]:
    if not views:
        return ["no schedules yet (beat syncs beat_schedule into the store when it starts leading)"]
    headers = ("NAME", "STATE", "SOURCE", "VER", "SCHEDULE", "TZ", "NEXT TICK", "LAST", "TASK")
    rows = [
        (
            v.name,
            f"{v.state} ({v.state_reason})" if v.state_reason else v.state,
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
    lines = table(headers, rows)
    for view in views:
        lines += [f"{printable(view.name)}: {line}" for line in invalid_lines(view)]
    return lines


def schedule_detail(detail: views.ScheduleDetail, ticks: Sequence[views.NextTick]) -> list[str]:
    """``show``: the settings, then what will happen (overdue first), then the next ticks."""
    d = detail.definition
    last = None
    if detail.last_tick_ms is not None:
        outcome = detail.last_outcome or "no outcome"
        last = f"{format_tick_instant(detail.last_tick_ms)} ({outcome})"
    missed = detail.missed
    rows: list[tuple[str, object]] = [
        ("name", detail.name),
        ("task", detail.task),
        ("schedule", f"{detail.schedule}  =  {detail.description}"),
        ("tz", detail.tz),
        ("state", _state_text(detail)),
        ("missed", missed if missed != "backfill" else f"backfill (max {detail.backfill_max})"),
        ("overlap", detail.overlap),
        ("jitter", EMPTY if detail.jitter is None else f"{detail.jitter:g}s"),
        ("max lateness", _seconds_text(d.max_lateness)),
        ("starts", detail.start_at),
        ("ends", detail.end_at),
        ("expires", _expires_text(detail.expires)),
        ("pause on failure", _failures_text(detail.pause_on_failure)),
        ("require worker", "yes" if detail.require_worker else None),
        ("buffered tick", detail.buffered_tick),
        ("args", _compact(detail.args) if detail.args else None),
        ("kwargs", _compact(detail.kwargs) if detail.kwargs else None),
        ("options", _compact(detail.options) if detail.options else None),
        ("last tick", last),
    ]
    if detail.overdue is not None:
        rows.append(("overdue", overdue_text(detail.overdue, detail.missed)))
    elif detail.next_tick is None and detail.state == "active" and detail.end_at is not None:
        rows.append(("next tick", f"none: ended {detail.end_at}"))
    else:
        rows.append(("next tick", detail.next_tick))
    rows = [(label, value) for label, value in rows if value is not None or label in _ALWAYS]
    if detail.about:
        rows.insert(1, ("about", detail.about))
    lines = table(None, rows) + invalid_lines(detail)
    lines.append("")
    lines.extend(next_ticks_table(ticks, detail.tz, state=detail.state))
    return lines


def _seconds_text(value: object) -> str:
    """A stored number of seconds, ``-`` when unset or not a number ``show`` can print."""
    if seconds_problem(value) is not None or not isinstance(value, (int, float)):
        return EMPTY
    return f"{value:g}s"


_ALWAYS = frozenset({"args", "kwargs", "options", "last tick", "next tick"})
"""Rows ``show`` prints even when empty; the others appear only when the schedule sets them."""


def _state_text(detail: views.ScheduleDetail) -> str:
    why = f", {detail.state_reason}" if detail.state_reason else ""
    return f"{detail.state}{why}  (source {detail.source}, version {detail.version})"


def _expires_text(expires: float | str | None) -> str | None:
    if expires is None:
        return None
    return "at the next tick" if isinstance(expires, str) else f"{expires:g}s after dispatch"


def _failures_text(count: int | None) -> str | None:
    return (
        None if count is None else f"after {count} failed run{'s' if count != 1 else ''} in a row"
    )


def overdue_text(overdue: views.Overdue, policy: str) -> str:
    """``since 15:49 (31 ticks due); the next round fires 16:19 (missed policy skip)``."""
    count = f"{overdue.missed} tick{'s' if overdue.missed != 1 else ''} due"
    if not overdue.fires:
        fires = "nothing (every due tick is past its max_lateness)"
    elif len(overdue.fires) == 1:
        fires = overdue.fires[0]
    else:
        fires = f"{len(overdue.fires)} ticks, {overdue.fires[0]} .. {overdue.fires[-1]}"
    return f"since {overdue.since} ({count}); the next round fires {fires} (missed: {policy})"


def _compact(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


_NOT_FIRING = {
    "paused": " (not firing until resumed)",
    "quarantined": " (not firing until resumed)",
    "archived": " (not firing: archived)",
}


def next_ticks_table(
    ticks: Sequence[views.NextTick], tz: str, *, state: str = "active"
) -> list[str]:
    """The occurrences of the spec; a schedule that is not active says it will not fire them."""
    if not ticks:
        return ["no upcoming ticks"]
    title = f"next {len(ticks)} tick{'s' if len(ticks) != 1 else ''}"
    note = _NOT_FIRING.get(state, "")
    return [
        f"{title}{note}:",
        *table((f"TICK ({tz})", "TASK ID"), [(t.tick, t.task_id) for t in ticks]),
    ]


def history_table(page: views.HistoryPage) -> list[str]:
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


def _event_row(event: views.EventView) -> tuple[object, ...]:
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


def trigger_line(name: str, result: views.TriggerResult) -> str:
    if result.created:
        return f"sent a manual run of {name}: task id {result.task_id}"
    return f"not sent: this idempotency key already ran {name} as task id {result.task_id}"


def state_line(verb: str, view: views.ScheduleView) -> str:
    """``paused nightly``; a resume also says when the next tick is."""
    line = f"{verb} {printable(view.name)} (state {view.state})"
    if view.next_tick:
        line += f"; next tick {view.next_tick}"
    return line


def status_lines(status: views.StatusView) -> list[str]:
    counts = ", ".join(f"{state} {count}" for state, count in status.counts.items())
    shown = [("namespace", status.namespace)] if status.namespace is not None else []
    return table(
        None,
        [
            *shown,
            ("leader", _leader(status)),
            ("fencing epoch", status.epoch),
            ("schedules", counts),
            ("due now", status.due_backlog),
            *_worker_rows(status),
        ],
    )


def _worker_rows(status: views.StatusView) -> list[tuple[str, str]]:
    """One row per live worker (hostname, queues, last seen); says so when there is none."""
    if not status.workers:
        return [("workers", "none seen (workers announce themselves with install(app))")]
    return [
        ("worker", f"{w.hostname}  queues {', '.join(w.queues) or EMPTY}  seen {w.last_seen}")
        for w in status.workers
    ]


def _leader(status: views.StatusView) -> str:
    """The holder and until when, or plainly that nobody leads: never a guess at the lease kind."""
    expires = status.lease_expires_at
    if status.leader is not None:
        return f"{status.leader} (lease until {expires})" if expires else status.leader
    if status.epoch == 0:
        return f"{NO_LEADER} (none has led this store yet)"
    if expires:
        return f"{NO_LEADER} (the last lease expired at {expires})"
    return NO_LEADER


NO_LEADER = "no leader: no beat holds the lease"


def backfill_lines(result: views.BackfillResult) -> list[str]:
    """One line per tick sent (or, dry, to send), then the totals."""
    verb = "would send" if result.dry_run else "sent"
    rows = [(verb, t.tick, t.task_id) for t in result.ticks]
    lines = table(None, rows) if rows else []
    lines.append(
        f"{result.schedule}: {verb} {len(result.ticks)} of {result.occurrences} occurrences in "
        f"the window ({result.already_enqueued} already enqueued)"
    )
    return lines


def actions_table(page: views.ActionsPage) -> list[str]:
    """The action log, newest first, with the next page's cursor."""
    if not page.actions:
        return ["no actions recorded"]
    rows = [(a.at, a.actor, a.action, a.schedule, a.reason) for a in page.actions]
    lines = table(("AT (UTC)", "ACTOR", "ACTION", "SCHEDULE", "REASON"), rows)
    if page.next_cursor:
        lines.append(f"older actions: --cursor {page.next_cursor}")
    return lines
