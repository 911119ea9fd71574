"""Run the app under uvicorn, with an access log that never shows a query string."""

from __future__ import annotations

import copy
from typing import Any

import uvicorn

from celery_durable_beat.control import DurableBeat
from celery_durable_beat.web.app import create_app


def log_config() -> dict[str, Any]:
    """uvicorn's own logging, plus ``NoQueryInAccessLog`` on the access handler."""
    config: dict[str, Any] = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config.setdefault("filters", {})["no_query"] = {
        "()": "celery_durable_beat.web.limits.NoQueryInAccessLog"
    }
    config["handlers"]["access"]["filters"] = ["no_query"]
    return config


def status_metrics(beat: DurableBeat) -> Any:
    """``/metrics`` for ``serve``: schedules by state, due backlog and fencing epoch, read from
    the store at scrape time (at most every 5 s); None without the ``metrics`` extra."""
    try:
        from celery_durable_beat.metrics import status_registry
    except ImportError:
        return None
    return status_registry(beat.status)


def serve(beat: DurableBeat, host: str, port: int) -> None:
    """Serve until interrupted; ``create_app`` refuses first when no token is configured."""
    app = create_app(beat, metrics=status_metrics(beat))
    beat.store.now_ms()  # schema checked and store reached before the first request
    uvicorn.run(app, host=host, port=port, log_config=log_config(), proxy_headers=False)
