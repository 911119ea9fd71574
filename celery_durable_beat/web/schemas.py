"""The HTTP API's bodies as pydantic models: they make the OpenAPI document.

Handlers answer with the control views' own ``to_json()`` (the CLI's ``--json``), so the API and
the CLI cannot drift; a test holds these models' fields to those of ``control.views``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


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
        description="cron, interval or at (one tick at an instant); invalid when unreadable"
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


class ScheduleDetailOut(ScheduleOut):
    """The ``show --json`` object; ``args``/``kwargs``/``options`` redacted."""

    description: str
    about: str | None
    overdue: OverdueOut | None
    next: list[str]
    args: list[Any]
    kwargs: dict[str, Any]
    options: dict[str, Any]


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
