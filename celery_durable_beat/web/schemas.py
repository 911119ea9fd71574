"""The HTTP API's bodies as pydantic models: they make the OpenAPI document.

Handlers answer with the control views' own ``to_json()`` (the CLI's ``--json``), so the API and
the CLI cannot drift; a test holds these models' fields to those of ``control.views``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from celery_durable_beat.control.actors import REASON_PATTERN


class Problem(BaseModel):
    field: str
    problem: str


class ExcludeRange(BaseModel):
    """An excluded range of dates, both ends included (``YYYY-MM-DD``)."""

    model_config = ConfigDict(populate_by_name=True)

    from_: str = Field(alias="from")
    to: str


class ScheduleOut(BaseModel):
    """A ``list --json`` item."""

    name: str
    task: str
    schedule: str
    tz: str
    missed: str
    backfill_max: int | None
    overlap: str
    jitter: float | None
    state: Literal["active", "paused", "archived", "quarantined"]
    version: int
    source: Literal["config", "api"]
    next_tick: str | None
    next_tick_ms: int | None
    last_tick_ms: int | None
    last_outcome: str | None
    start_at: str | None
    end_at: str | None
    expires: float | Literal["next_tick"] | None
    pause_on_failure: int | None
    require_worker: bool | None
    state_reason: Literal["operator", "disabled", "failures"] | None
    buffered_tick: str | None
    kind: str = Field(
        description="cron, interval, at (one tick at an instant), solar, rrule (an RFC 5545 "
        "recurrence rule) or custom (a schedule class in the app's config); invalid when "
        "unreadable"
    )
    exclude: list[str | ExcludeRange] | None = Field(
        description="Dates without occurrences, in the schedule's zone (an interval's: the "
        "app's zone), as written; null when none"
    )
    invalid: list[Problem] | None = Field(
        None,
        description="Only when a stored value cannot be shown (a row written by hand or by an "
        "older version): each field that holds a stand-in, and why",
    )


class OverdueOut(BaseModel):
    since: str
    missed: int
    fires: list[str]


class PausedByOut(BaseModel):
    """The operator's pause holding a schedule; ``at`` is ISO 8601 UTC."""

    actor: str
    at: str
    reason: str | None


class ScheduleDetailOut(ScheduleOut):
    """The ``show --json`` object; ``args``/``kwargs``/``options`` redacted."""

    description: str
    about: str | None
    overdue: OverdueOut | None
    next: list[str]
    args: list[Any]
    kwargs: dict[str, Any]
    options: dict[str, Any]
    paused_by: PausedByOut | None


def _reason() -> Any:
    """The ``reason`` field every writing body has (SPEC §15)."""
    return Field(
        None,
        max_length=500,
        pattern=REASON_PATTERN,
        description="Why (recorded in the action log with the token's name; at most 500 "
        "characters of one line)",
    )


class ReasonIn(BaseModel):
    """The optional body of a state change: why, for the action log (SPEC §15)."""

    model_config = ConfigDict(extra="forbid")

    reason: str | None = _reason()


class BackfillIn(BaseModel):
    """A window ``[from, to]`` of ISO 8601 instants with offsets (SPEC §15)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    from_: str = Field(
        alias="from", description="The window's first instant, e.g. 2026-12-01T00:00:00Z"
    )
    to: str = Field(description="The window's last instant (at most now)")
    reason: str | None = _reason()
    dry_run: bool = Field(False, description="List what would be published; send nothing")


class BackfillTickOut(BaseModel):
    tick: str
    tick_ms: int
    task_id: str


class BackfillOut(BaseModel):
    """What a backfill published (``dry_run``: would publish), oldest first."""

    schedule: str
    dry_run: bool
    occurrences: int
    already_enqueued: int
    ticks: list[BackfillTickOut]


class ActionOut(BaseModel):
    """One operator action; ``at`` is ISO 8601 UTC."""

    at: str
    actor: str
    action: Literal[
        "pause", "resume", "archive", "delete", "upsert", "trigger", "backfill", "import"
    ]
    schedule: str
    reason: str | None


class ActionsOut(BaseModel):
    """``actions --json``: newest first; pass ``next_cursor`` back for older ones."""

    actions: list[ActionOut]
    next_cursor: str | None


class EventOut(BaseModel):
    schedule: str
    tick_ms: int
    task_id: str | None
    trigger: str
    outcome: Literal["enqueued", "deduplicated", "failed", "skipped"]
    reason: str | None
    lag_ms: int | None
    version: int
    recorded_at: str
    run_state: str | None


class HistoryOut(BaseModel):
    """``history --json``: newest first; pass ``next_cursor`` back for older events."""

    events: list[EventOut]
    next_cursor: str | None


class WorkerOut(BaseModel):
    """A live worker that ran ``install(app)``; ``last_seen`` is ISO 8601 UTC."""

    hostname: str
    queues: list[str]
    last_seen: str


class StatusOut(BaseModel):
    namespace: str | None
    leader: str | None
    epoch: int
    lease_expires_at: str | None
    counts: dict[str, int]
    due_backlog: int
    workers: list[WorkerOut]


class TriggerIn(BaseModel):
    """``kwargs`` are merged over the schedule's own for this run only."""

    model_config = ConfigDict(extra="forbid")

    kwargs: dict[str, Any] | None = None
    reason: str | None = _reason()


class TriggerOut(BaseModel):
    task_id: str
    created: bool


class UpsertOut(BaseModel):
    status: Literal["created", "updated", "unchanged"]
    schedule: ScheduleOut


class ErrorBody(BaseModel):
    code: Literal[
        "unauthorized",
        "forbidden",
        "not_found",
        "method_not_allowed",
        "conflict",
        "invalid",
        "too_large",
        "store_unavailable",
        "broker_unavailable",
        "lease_unavailable",
        "internal",
    ]
    message: str
    problems: list[Problem] | None = Field(None, description="With code invalid: each problem.")


class ErrorOut(BaseModel):
    error: ErrorBody
