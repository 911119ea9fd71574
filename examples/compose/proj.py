"""The example app that ``docker/compose.yaml`` runs: every setting comes from the environment.

The same module is beat, worker, ``durable-beat serve`` and Flower's app, so one image serves
every service. Nothing is read from a file; these variables configure it:

``CELERY_BROKER_URL``          the broker (Redis in the compose file); required
``DURABLE_BEAT_URL``           the store, e.g. ``postgresql+psycopg://beat:beat@postgres/beat``
                               (read by celery_durable_beat itself); required here
``DURABLE_BEAT_LEASE_URL``     a Redis lease (``redis://...``); unset: the store's lease row
``DURABLE_BEAT_METRICS_PORT``  the port beat serves Prometheus ``/metrics`` on; unset: off
``DURABLE_BEAT_API_TOKENS``    ``role:token,...`` for ``durable-beat serve`` (read by the package)
``DURABLE_BEAT_FLOWER_URL``    where the console links task ids to, e.g. ``http://localhost:5555``
``CELERY_TIMEZONE``            the zone cron schedules are read in; default ``UTC``
``PARTNER_API_PASSWORD``       a secret the ``partner-sync`` schedule passes to its task: Flower,
                               worker logs and the console show it as ``***``

Run it outside Docker the same way: ``CELERY_BROKER_URL=... DURABLE_BEAT_URL=... celery -A proj
beat -S celery_durable_beat.Scheduler`` from this folder.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

from celery_durable_beat import install


def required(name: str) -> str:
    """An environment variable the app cannot run without, or one line saying what to set."""
    value = os.environ.get(name, "")
    if not value:
        raise SystemExit(f"proj: set the environment variable {name} (examples/compose/proj.py)")
    return value


app = Celery("proj", broker=required("CELERY_BROKER_URL"))
app.conf.update(
    timezone=os.environ.get("CELERY_TIMEZONE") or "UTC",
    durable_beat_url=required("DURABLE_BEAT_URL"),
    task_ignore_result=True,
    worker_send_task_events=True,  # Flower sees each tick's task events
    task_send_sent_event=True,
    broker_connection_retry_on_startup=True,
    beat_schedule={
        "heartbeat": {
            "task": "proj.heartbeat",
            "schedule": "@every 10s",
            "kwargs": {"planned": "{{scheduled_for}}"},
            "missed": "run_once",
        },
        "partner-sync": {
            "task": "proj.partner_sync",
            "schedule": "*/5 * * * *",
            "kwargs": {"partner": "acme", "api_password": os.environ.get("PARTNER_API_PASSWORD")},
            "description": "every 5 minutes; its api_password shows as *** everywhere",
        },
        "nightly-report": {
            "task": "proj.report",
            "schedule": "0 3 * * *",  # read in CELERY_TIMEZONE, DST-correct
            "missed": "run_once",
        },
    },
)
if os.environ.get("DURABLE_BEAT_LEASE_URL"):
    app.conf.durable_beat_lease_url = os.environ["DURABLE_BEAT_LEASE_URL"]
if os.environ.get("DURABLE_BEAT_METRICS_PORT"):
    app.conf.durable_beat_metrics_port = int(os.environ["DURABLE_BEAT_METRICS_PORT"])
if os.environ.get("DURABLE_BEAT_FLOWER_URL"):
    app.conf.durable_beat_flower_url = os.environ["DURABLE_BEAT_FLOWER_URL"]
install(app)  # the worker side: a tick delivered twice executes once


@app.task(name="proj.heartbeat", bind=True)
def heartbeat(self: Any, planned: str) -> str:
    print(f"TICK heartbeat id={self.request.id} planned={planned}", flush=True)
    return planned


@app.task(name="proj.partner_sync", bind=True)
def partner_sync(self: Any, partner: str, api_password: str) -> None:
    print(f"TICK partner-sync id={self.request.id} partner={partner}", flush=True)


@app.task(name="proj.report", bind=True)
def report(self: Any) -> None:
    print(f"TICK nightly-report id={self.request.id}", flush=True)
