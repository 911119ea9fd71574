"""Error bodies ``{"error": {"code", "message"[, "problems"]}}`` and the status of each (§9).

Every refusal has this shape, FastAPI's and starlette's own included (unknown route, wrong
method, unparseable body): their ``{"detail"}`` never reaches a client. A wrong method answers
405 with the methods the path really has, gathered from every route that matches it (starlette
names only the first one's).
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import Match

from celery_durable_beat.exceptions import (
    ConfigError,
    InvalidArgument,
    LeaseError,
    PublishFailed,
    ScheduleConflict,
    ScheduleNotFound,
    StoreError,
)
from celery_durable_beat.settings import Role
from celery_durable_beat.web.auth import Tokens, allows, bearer

STORE_UNAVAILABLE = "store_unavailable"
"""The code of every answer given while the store does not answer (503)."""


class ApiError(Exception):
    """An answer other than success, raised from a handler and rendered by ``error_response``."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        problems: list[dict[str, str]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.problems, self.headers = problems, headers


def unauthorized() -> ApiError:
    return ApiError(
        401,
        "unauthorized",
        "send Authorization: Bearer <token> with a token from durable_beat_api_tokens",
        headers={"WWW-Authenticate": "Bearer"},
    )


def error_response(error: ApiError) -> JSONResponse:
    body: dict[str, Any] = {"code": error.code, "message": error.message}
    if error.problems is not None:
        body["problems"] = error.problems
    return JSONResponse({"error": body}, status_code=error.status, headers=error.headers)


_BY_TYPE: tuple[tuple[type[Exception], int, str, str | None], ...] = (
    (ScheduleNotFound, 404, "not_found", None),
    (ScheduleConflict, 409, "conflict", None),
    (InvalidArgument, 422, "invalid", None),
    (PublishFailed, 503, "broker_unavailable", None),
    (StoreError, 503, STORE_UNAVAILABLE, "the schedule store does not answer; try again"),
    (LeaseError, 503, "lease_unavailable", "the lease backend does not answer; try again"),
)
"""Our exceptions by status and code; ``None``: the exception's own text is the message."""


def from_domain(exc: Exception) -> ApiError:
    """Our exceptions as HTTP answers; anything else is not ours to explain (500)."""
    if isinstance(exc, ConfigError):
        problems = [{"field": p.field, "problem": p.problem} for p in exc.problems]
        return ApiError(422, "invalid", str(exc).splitlines()[0], problems)
    if isinstance(exc, InvalidArgument) and exc.field is not None:
        problems = [{"field": exc.field, "problem": str(exc)}]
        return ApiError(422, "invalid", str(exc), problems)
    for kind, status, code, message in _BY_TYPE:
        if isinstance(exc, kind):
            return ApiError(status, code, str(exc) if message is None else message)
    raise exc


async def on_api_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return error_response(exc)


async def on_validation_error(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422 in our error shape: each problem with the field it is about.

    The body is read before a route's dependencies run, so a refusal of the caller (401, 403)
    is decided here first: a stranger learns nothing from how a body is judged. A body that is
    not JSON at all is 400, a JSON body of the wrong shape 422.
    """
    assert isinstance(exc, RequestValidationError)
    refused = _caller_refused(request)
    if refused is not None:
        return error_response(refused)
    errors = exc.errors()
    if any(err.get("type") == "json_invalid" for err in errors):
        return error_response(ApiError(400, "invalid", "the request body is not valid JSON"))
    problems = [
        {
            "field": ".".join(str(part) for part in err["loc"] if part != "body") or "body",
            "problem": _problem_text(err),
        }
        for err in errors
    ]
    return error_response(ApiError(422, "invalid", "the request is not valid", problems))


_PATTERN_MEANING = {
    "reason": "reason holds a control character (a newline, tab or escape); give one line of "
    "plain text",
}
"""What a field's pattern means, said instead of pydantic's "should match pattern '^[^…]'"."""


def _problem_text(err: Any) -> str:
    field = str(err["loc"][-1]) if err.get("loc") else ""
    if err.get("type") == "string_pattern_mismatch" and field in _PATTERN_MEANING:
        return _PATTERN_MEANING[field]
    return str(err["msg"])


_HTTP_CODES = {
    400: ("invalid", "the request body cannot be read (send UTF-8 JSON)"),
    404: ("not_found", "no such page or endpoint; the API is under /api/v1"),
    405: ("method_not_allowed", "this path does not take that method"),
}


async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
    """starlette's and FastAPI's own refusals (unknown route, wrong method, unreadable body)."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 400:
        refused = _caller_refused(request)
        if refused is not None:
            return error_response(refused)
    code, message = _HTTP_CODES.get(exc.status_code, ("invalid", str(exc.detail)))
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        allowed = allowed_methods(request)
        headers["Allow"] = ", ".join(allowed)
        message = f"this path takes {', '.join(allowed)}"
    return error_response(ApiError(exc.status_code, code, message, headers=headers))


METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def allowed_methods(request: Request) -> list[str]:
    """Every method some route takes at this path, each tried on the app's routes through the
    public ``matches`` (so the routers FastAPI nests answer too, whatever their inner shape)."""
    routes = request.app.router.routes
    return [
        method
        for method in METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes
        )
    ]


def _caller_refused(request: Request) -> ApiError | None:
    """401 or 403 when the matched API route needs a role the caller lacks, else None."""
    route = request.scope.get("route")
    needed = (getattr(route, "openapi_extra", None) or {}).get("x-role")
    if needed is None:
        return None
    tokens: Tokens = request.app.state.tokens
    return refusal(tokens.role_of(bearer(request.headers.get("authorization"))), Role(needed))


def refusal(found: Role | None, needed: Role) -> ApiError | None:
    """401 for no or an unknown token, 403 for a role too weak for ``needed``, else None."""
    if found is None:
        return unauthorized()
    if not allows(found, needed):
        return ApiError(
            403, "forbidden", f"this needs the {needed.value} role; yours is {found.value}"
        )
    return None
