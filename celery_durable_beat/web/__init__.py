"""``durable-beat serve``: the HTTP API, the web console and ``/metrics`` (SPEC §9, §10).

Needs the ``web`` extra (FastAPI, uvicorn, Jinja2). Like the CLI, every page and endpoint goes
through :class:`~celery_durable_beat.control.DurableBeat`; the server never dispatches.
"""

from celery_durable_beat.web.app import create_app

__all__ = ["create_app"]
