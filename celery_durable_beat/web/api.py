"""``/api/v1``: the JSON API of SPEC §9, one handler per row of its table.

Each handler calls one ``DurableBeat`` method and answers with that view's ``to_json()``, exactly
what the CLI prints with ``--json``. Names may hold ``/`` and any other character: the action
routes take ``{name:anyname}`` and the bare ones ``{name:schedule}``, which never ends in an
action suffix, so each path has one reading (``web/names.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Header, Query, Request, Response
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from celery_durable_beat.control import DurableBeat
from celery_durable_beat.control.api import ACTIONS_LIMIT, COUNT_LIMIT, HISTORY_LIMIT, ScheduleView
from celery_durable_beat.exceptions import InvalidArgument
from celery_durable_beat.settings import Role
from celery_durable_beat.web import schemas
from celery_durable_beat.web.auth import Caller, Tokens
from celery_durable_beat.web.errors import ApiError, refusal
from celery_durable_beat.web.names import register_convertors

_bearer = HTTPBearer(auto_error=False, description="A token from durable_beat_api_tokens")
_MEANING = {
    400: "The body is not JSON",
    401: "No token, or one not configured",
    403: "The token's role may not do this",
    404: "No schedule by that name",
    409: "Config owns the name, or the schedule is archived",
    413: "The body is over 1 MiB",
    422: "Invalid body or query, each problem with its field",
    503: "The store (or, for a manual run, the broker) does not answer",
}


def errors(
    *codes: int, extra: dict[int | str, dict[str, Any]] | None = None
) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` of an operation: its error answers, then ``extra``."""
    found: dict[int | str, dict[str, Any]] = {
        code: {"model": schemas.ErrorOut, "description": _MEANING[code]}
        for code in (401, 503, *codes)
    }
    found.update(extra or {})
    return found


register_convertors()
router = APIRouter(prefix="/api/v1")


def needs(role: Role) -> Callable[..., Caller]:
    """A dependency: the caller (role and token name), if its role is at least ``role`` (else
    401 or 403). Writing handlers record the name as the actor (SPEC §15)."""

    def check(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> Caller:
        tokens: Tokens = request.app.state.tokens
        found = tokens.identify(None if credentials is None else credentials.credentials)
        refused = refusal(None if found is None else found.role, role)
        if refused is not None:
            raise refused
        assert found is not None
        return found

    return check


def role_doc(role: Role) -> dict[str, Any]:
    """The role an operation needs, in the OpenAPI document (``x-role``; docs/api.md shows it)."""
    return {"x-role": role.value}


def control(request: Request) -> DurableBeat:
    beat: DurableBeat = request.app.state.beat
    return beat


Beat = Annotated[DurableBeat, Depends(control)]
Viewer = Depends(needs(Role.VIEWER))
Operator = Depends(needs(Role.OPERATOR))
Admin = Depends(needs(Role.ADMIN))
AsOperator = Annotated[Caller, Operator]
AsAdmin = Annotated[Caller, Admin]
Why = Annotated[schemas.ReasonIn | None, Body()]


def reason_of(body: schemas.ReasonIn | None) -> str | None:
    return None if body is None else body.reason


@router.get(
    "/schedules",
    response_model=list[schemas.ScheduleOut],
    dependencies=[Viewer],
    openapi_extra=role_doc(Role.VIEWER),
    responses=errors(),
)
def list_schedules(beat: Beat) -> Response:
    """Every schedule, archived ones included, ordered by name (``list --json``)."""
    return JSONResponse([view.to_json() for view in beat.list()])


@router.get(
    "/status",
    response_model=schemas.StatusOut,
    dependencies=[Viewer],
    openapi_extra=role_doc(Role.VIEWER),
    responses=errors(),
)
def status(beat: Beat) -> Response:
    """Leader, epoch, lease expiry, schedules by state, due backlog, workers (``status --json``)."""
    return JSONResponse(beat.status().to_json())


@router.get(
    "/schedules/{name:anyname}/enqueue-events",
    response_model=schemas.HistoryOut,
    dependencies=[Viewer],
    openapi_extra=role_doc(Role.VIEWER),
    responses=errors(404, 422),
)
def enqueue_events(
    beat: Beat,
    name: str,
    limit: Annotated[int, Query(ge=HISTORY_LIMIT[0], le=HISTORY_LIMIT[1])] = 30,
    cursor: str | None = None,
) -> Response:
    """History, newest first; ``next_cursor`` pages to older events (``history --json``)."""
    return JSONResponse(beat.history(name, limit=limit, cursor=cursor).to_json())


@router.post(
    "/schedules/{name:anyname}/pause",
    response_model=schemas.ScheduleOut,
    dependencies=[Operator],
    openapi_extra=role_doc(Role.OPERATOR),
    responses=errors(400, 403, 404, 409, 422),
)
def pause(beat: Beat, name: str, caller: AsOperator, body: Why = None) -> Response:
    """Stop ticking until resumed; ``reason`` is recorded with the token's name."""
    view = beat.pause(name, reason=reason_of(body), actor=caller.name)
    return JSONResponse(view.to_json())


@router.post(
    "/schedules/{name:anyname}/resume",
    response_model=schemas.ScheduleOut,
    dependencies=[Operator],
    openapi_extra=role_doc(Role.OPERATOR),
    responses=errors(400, 403, 404, 409, 422),
)
def resume(beat: Beat, name: str, caller: AsOperator, body: Why = None) -> Response:
    """Tick again from the first occurrence after now (the pause is not replayed)."""
    view = beat.resume(name, reason=reason_of(body), actor=caller.name)
    return JSONResponse(view.to_json())


@router.post(
    "/schedules/{name:anyname}/archive",
    response_model=schemas.ScheduleOut,
    dependencies=[Admin],
    openapi_extra=role_doc(Role.ADMIN),
    responses=errors(400, 403, 404, 422),
)
def archive(beat: Beat, name: str, caller: AsAdmin, body: Why = None) -> Response:
    """Retire the schedule; its history is kept."""
    view = beat.archive(name, reason=reason_of(body), actor=caller.name)
    return JSONResponse(view.to_json())


@router.post(
    "/schedules/{name:anyname}/trigger",
    response_model=schemas.TriggerOut,
    status_code=201,
    dependencies=[Operator],
    openapi_extra=role_doc(Role.OPERATOR),
    responses=errors(
        400,
        403,
        404,
        413,
        422,
        extra={200: {"model": schemas.TriggerOut, "description": "A replay"}},
    ),
)
def trigger(
    beat: Beat,
    name: str,
    caller: AsOperator,
    body: Annotated[schemas.TriggerIn | None, Body()] = None,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
) -> Response:
    """Run now, outside the plan; the same ``Idempotency-Key`` never runs twice, and one
    reused with another body is refused (422)."""
    kwargs = None if body is None else body.kwargs
    reason = None if body is None else body.reason
    result = beat.trigger(
        name, kwargs=kwargs, idempotency_key=idempotency_key, reason=reason, actor=caller.name
    )
    return JSONResponse(result.to_json(), status_code=201 if result.created else 200)


@router.post(
    "/schedules/{name:anyname}/backfill",
    response_model=schemas.BackfillOut,
    dependencies=[Operator],
    openapi_extra=role_doc(Role.OPERATOR),
    responses=errors(400, 403, 404, 409, 413, 422),
)
def backfill(
    beat: Beat, name: str, caller: AsOperator, body: Annotated[schemas.BackfillIn, Body()]
) -> Response:
    """Publish, oldest first, every occurrence in ``[from, to]`` that was never enqueued, each
    under its automatic tick's id (at most 1,000; ``dry_run``: list them)."""
    result = beat.backfill(
        name,
        instant("from", body.from_),
        instant("to", body.to),
        dry_run=body.dry_run,
        reason=body.reason,
        actor=caller.name,
    )
    return JSONResponse(result.to_json())


def instant(field: str, text: str) -> datetime:
    """An ISO 8601 instant with an offset (``Z`` allowed); 422 naming ``field`` otherwise."""
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise InvalidArgument(
            f"{field} {text!r} is not an ISO 8601 instant with an offset; e.g. "
            "2026-12-01T03:00:00Z",
            field=field,
        )
    return parsed


@router.get(
    "/actions",
    response_model=schemas.ActionsOut,
    dependencies=[Viewer],
    openapi_extra=role_doc(Role.VIEWER),
    responses=errors(404, 422),
)
def actions(
    beat: Beat,
    schedule: str | None = None,
    limit: Annotated[int, Query(ge=ACTIONS_LIMIT[0], le=ACTIONS_LIMIT[1])] = 30,
    cursor: str | None = None,
) -> Response:
    """Operator actions (who, what, why), newest first, of one schedule or all (``actions
    --json``); ``next_cursor`` pages to older ones."""
    return JSONResponse(beat.actions(schedule or None, limit=limit, cursor=cursor).to_json())


@router.get(
    "/schedules/{name:schedule}",
    response_model=schemas.ScheduleDetailOut,
    dependencies=[Viewer],
    openapi_extra=role_doc(Role.VIEWER),
    responses=errors(404, 422),
)
def show(
    beat: Beat,
    name: str,
    count: Annotated[int, Query(ge=COUNT_LIMIT[0], le=COUNT_LIMIT[1])] = 5,
) -> Response:
    """One schedule with its next ``count`` ticks (``show --json``)."""
    return JSONResponse(beat.get(name, count=count).to_json())


@router.put(
    "/schedules/{name:schedule}",
    response_model=schemas.UpsertOut,
    dependencies=[Admin],
    openapi_extra=role_doc(Role.ADMIN),
    responses=errors(
        400, 403, 409, 413, 422, extra={201: {"model": schemas.UpsertOut, "description": "Created"}}
    ),
)
def upsert(
    beat: Beat,
    name: str,
    caller: AsAdmin,
    entry: Annotated[
        dict[str, Any],
        Body(
            description="A beat_schedule entry as JSON; an optional `reason` key is the "
            "action log's reason, not part of the entry"
        ),
    ],
) -> Response:
    """Create or change an API schedule; a name config owns is refused (409)."""
    definition = {k: v for k, v in entry.items() if k != "reason"}
    status = beat.upsert(name, definition, reason=entry.get("reason"), actor=caller.name)
    schedule = ScheduleView.to_json(beat.get(name, count=1))  # the list fields only
    body = {"status": status.value, "schedule": schedule}
    return JSONResponse(body, status_code=201 if status.value == "created" else 200)


@router.delete(
    "/schedules/{name:schedule}",
    status_code=204,
    dependencies=[Admin],
    openapi_extra=role_doc(Role.ADMIN),
    responses=errors(400, 403, 404, 409, 422),
)
def delete(beat: Beat, name: str, caller: AsAdmin, body: Why = None) -> Response:
    """Remove an API schedule (history stays readable); config owns its own (409)."""
    if beat.get(name, count=1).source == "config":
        raise ApiError(
            409,
            "conflict",
            f'schedule "{name}" comes from beat_schedule; remove it from the config instead',
        )
    beat.delete(name, reason=reason_of(body), actor=caller.name)
    return Response(status_code=204)
