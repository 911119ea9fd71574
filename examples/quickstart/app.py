"""A Celery app with two durable schedules, on the embedded default: no server at all.

Store: SQLite (``celerybeat-durable.sqlite3`` in this folder). Broker: kombu's ``filesystem://``
transport in ``.demo-queue/`` here, polled every 0.1 s. For production, point
``durable_beat_url`` at PostgreSQL and ``broker_url`` at Redis or RabbitMQ (see the README).
"""

from __future__ import annotations

import os

from celery import Celery

from celery_durable_beat import install

HERE = os.path.dirname(os.path.abspath(__file__))
QUEUE = os.path.join(HERE, ".demo-queue")
for folder in ("data", "control", "processed"):
    os.makedirs(os.path.join(QUEUE, folder), exist_ok=True)

app = Celery("quickstart", broker="filesystem://")
app.conf.update(
    broker_transport_options={
        "data_folder_in": os.path.join(QUEUE, "data"),
        "data_folder_out": os.path.join(QUEUE, "data"),
        "control_folder": os.path.join(QUEUE, "control"),
        "processed_folder": os.path.join(QUEUE, "processed"),
        "store_processed": False,
        "polling_interval": 0.1,
    },
    task_ignore_result=True,
    timezone="Europe/Berlin",
    durable_beat_url=f"sqlite:///{os.path.join(HERE, 'celerybeat-durable.sqlite3')}",
    beat_schedule={
        "heartbeat": {
            "task": "quickstart.heartbeat",
            "schedule": "@every 2s",
            "kwargs": {"planned": "{{scheduled_for}}"},
            "missed": "backfill",
            "backfill_max": 5,
        },
        "minutely-report": {
            "task": "quickstart.report",
            "schedule": "* * * * *",  # read in Europe/Berlin, the app's timezone
            "description": "a cron entry in the app's zone",
        },
    },
)
install(app)  # the worker side: a duplicate delivery of a tick never runs twice


@app.task(name="quickstart.heartbeat", bind=True)
def heartbeat(self: object, planned: str) -> str:
    request = self.request  # type: ignore[attr-defined]
    print(f"TICK heartbeat id={request.id} planned={planned}", flush=True)
    return planned


@app.task(name="quickstart.report", bind=True)
def report(self: object) -> None:
    print(f"TICK minutely-report id={self.request.id}", flush=True)  # type: ignore[attr-defined]
