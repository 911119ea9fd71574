"""Run the app under uvicorn, with an access log that never shows a query string."""

from __future__ import annotations

import copy
import logging
from typing import Any

import uvicorn

from celery_durable_beat.control import DurableBeat
from celery_durable_beat.exceptions import SchemaOutdated, StoreError
from celery_durable_beat.logs import cause, log_extra
from celery_durable_beat.model import Action
from celery_durable_beat.web.app import create_app

log = logging.getLogger("celery_durable_beat.web")


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


def serve(beat: DurableBeat, host: str, port: int, forwarded_allow_ips: str | None = None) -> None:
    """Serve until interrupted; ``create_app`` refuses first when the tokens are unusable.

    A store that does not answer does not stop it (SPEC §9): it says so once, answers 503
    ``store_unavailable`` meanwhile, and every request tries the store again, so it recovers on
    its own. An outdated schema is no outage: ``serve`` refuses to start, naming ``migrate``.

    ``forwarded_allow_ips`` (``serve --forwarded-allow-ips``) names the proxies whose
    ``X-Forwarded-For`` / ``X-Forwarded-Proto`` are believed (uvicorn's proxy headers); unset,
    none is, so a client cannot claim HTTPS or another address.
    """
    app = create_app(beat, metrics=status_metrics(beat))
    reach_store(beat)
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_config=log_config(),
        proxy_headers=bool(forwarded_allow_ips),
        forwarded_allow_ips=forwarded_allow_ips or None,
    )


def reach_store(beat: DurableBeat) -> None:
    """Check the schema now when the store answers; log (without its password) when not."""
    try:
        beat.store.now_ms()
    except SchemaOutdated:
        raise
    except StoreError as exc:
        log.warning(
            "store unavailable at start; serving 503 until it answers: %s",
            cause(exc),
            extra=log_extra(Action.STORE_UNAVAILABLE, cause=cause(exc)),
        )
