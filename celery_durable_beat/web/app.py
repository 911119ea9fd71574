"""The ASGI app of ``durable-beat serve``: API, console, ``/healthz`` and ``/metrics`` in one."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from celery_durable_beat.control import DurableBeat
from celery_durable_beat.exceptions import DurableBeatError
from celery_durable_beat.settings import Role
from celery_durable_beat.web import api, console
from celery_durable_beat.web.auth import Tokens
from celery_durable_beat.web.errors import (
    STORE_UNAVAILABLE,
    ApiError,
    error_response,
    from_domain,
    on_api_error,
    on_http_error,
    on_validation_error,
)
from celery_durable_beat.web.limits import BodyLimit, Guard
from celery_durable_beat.web.session import Sessions, SignInThrottle


def create_app(
    beat: DurableBeat,
    *,
    tokens: Mapping[str, Role] | None = None,
    flower_url: str | None = None,
    metrics: Any = None,
) -> FastAPI:
    """The server for ``beat``'s app: tokens and Flower URL default to its settings.

    ``metrics`` is a prometheus-client registry served at ``/metrics`` (``server.status_metrics``).
    Raises ``auth.BadTokens`` when no token is configured (an API without one would be open)
    or one is too short. Nothing here reaches the store: the app starts while it is down.
    """
    settings = beat.settings
    app = FastAPI(
        title="celery_durable_beat",
        summary="Durable, highly available Celery beat: schedules, history, manual runs.",
        version="1",
        openapi_url="/api/v1/openapi.json",
        docs_url=None,
        redoc_url=None,
    )
    app.state.beat = beat
    app.state.tokens = Tokens(
        tokens if tokens is not None else settings.api_tokens, settings.names.of("api_tokens")
    )
    app.state.flower_url = flower_url if flower_url is not None else settings.flower_url
    app.state.sessions = Sessions()
    app.state.throttle = SignInThrottle()
    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(HTTPException, on_http_error)
    app.add_exception_handler(DurableBeatError, _on_domain_error)
    app.add_middleware(BodyLimit)
    app.add_middleware(Guard)  # added last: outermost, so BodyLimit's 413 gets the headers
    app.include_router(api.router)
    app.include_router(console.router)
    app.mount("/static", StaticFiles(directory=Path(__file__).with_name("static")), name="static")
    if metrics is not None:
        app.get("/metrics", include_in_schema=False)(_metrics_route(metrics))
    app.get("/healthz", include_in_schema=False)(_healthz)
    return app


async def _on_domain_error(_request: Request, exc: Exception) -> JSONResponse:
    return error_response(from_domain(exc))


def _metrics_route(registry: Any) -> Callable[[], Response]:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    def metrics() -> Response:
        """Prometheus text; no token (it carries no schedule names), like beat's own port."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return metrics


def _healthz(request: Request) -> Response:
    """200 when the store answers, 503 otherwise; no auth (for load balancers and probes)."""
    beat: DurableBeat = request.app.state.beat
    try:
        beat.store.now_ms()
    except DurableBeatError:
        error = {"code": STORE_UNAVAILABLE, "message": "the schedule store does not answer"}
        body = {"status": "unavailable", "store": "not answering", "error": error}
        return JSONResponse(body, status_code=503)
    return JSONResponse({"status": "ok"})
