"""Error bodies ``{"error": {"code", "message"[, "problems"]}}`` and the status of each (§9)."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from celery_durable_beat.exceptions import (
    ConfigError,
    InvalidArgument,
    PublishFailed,
    ScheduleConflict,
    ScheduleNotFound,
    StoreError,
)


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


def from_domain(exc: Exception) -> ApiError:
    """Our exceptions as HTTP answers; anything else is not ours to explain (500)."""
    if isinstance(exc, ScheduleNotFound):
        return ApiError(404, "not_found", str(exc))
    if isinstance(exc, ScheduleConflict):
        return ApiError(409, "conflict", str(exc))
    if isinstance(exc, ConfigError):
        problems = [{"field": p.field, "problem": p.problem} for p in exc.problems]
        return ApiError(422, "invalid", str(exc).splitlines()[0], problems)
    if isinstance(exc, InvalidArgument):
        return ApiError(422, "invalid", str(exc))
    if isinstance(exc, PublishFailed):
        return ApiError(503, "unavailable", str(exc))
    if isinstance(exc, StoreError):
        return ApiError(503, "unavailable", "the schedule store does not answer; try again")
    raise exc


async def on_api_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return error_response(exc)


async def on_validation_error(_request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422 in our error shape: each problem with the field it is about."""
    assert isinstance(exc, RequestValidationError)
    problems = [
        {
            "field": ".".join(str(part) for part in err["loc"] if part != "body") or "body",
            "problem": str(err["msg"]),
        }
        for err in exc.errors()
    ]
    return error_response(ApiError(422, "invalid", "the request is not valid", problems))
