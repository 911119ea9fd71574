"""Real peer data, written by the peers' own code in a subprocess (``write_*``).

Django configures its settings once per process and sqlalchemy-celery-beat's models warn on
import under SQLAlchemy 2, so each peer runs in a child Python of its own: the test process
imports none of them, exactly as the importers do not. Every writer creates the same story:
an interval with every per-message option, crontabs in a zone (``*/15``; day of month and day
of week together), a disabled entry, one-shot tasks (clocked ones, ``one_off`` interval and
crontab ones, one that already ran), and the entries the import must refuse.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from typing import Any

from sqlalchemy.engine import make_url

PAST = datetime(2024, 1, 1, tzinfo=timezone.utc)
FUTURE = datetime(2099, 1, 1, tzinfo=timezone.utc)

DJANGO = r"""
import json, sys
from datetime import datetime, timezone
import django
from django.conf import settings

settings.configure(
    DATABASES={"default": json.loads(sys.argv[1])},
    INSTALLED_APPS=["django_celery_beat"],
    USE_TZ=True,
    TIME_ZONE="UTC",
    DEFAULT_AUTO_FIELD="django.db.models.AutoField",
)
django.setup()
from django.core.management import call_command
call_command("migrate", "django_celery_beat", verbosity=0)
from django_celery_beat.models import (
    ClockedSchedule, CrontabSchedule, IntervalSchedule, PeriodicTask, SolarSchedule,
)

PAST = datetime(2024, 1, 1, tzinfo=timezone.utc)
FUTURE = datetime(2099, 1, 1, tzinfo=timezone.utc)
every90 = IntervalSchedule.objects.create(every=90, period=IntervalSchedule.SECONDS)
hourly = IntervalSchedule.objects.create(every=1, period=IntervalSchedule.HOURS)
quarter = CrontabSchedule.objects.create(
    minute="*/15", hour="9-17", day_of_week="*", day_of_month="*", month_of_year="*",
    timezone="America/New_York",
)
first_monday = CrontabSchedule.objects.create(
    minute="0", hour="8", day_of_week="1", day_of_month="1-7", month_of_year="*",
    timezone="Europe/Berlin",
)
PeriodicTask.objects.create(
    name="every-90s", task="proj.report", interval=every90,
    args=json.dumps([1, "two"]), kwargs=json.dumps({"depth": {"max": 3}}),
    queue="reports", exchange="reports-ex", routing_key="reports.rk", priority=7,
    expire_seconds=300, headers=json.dumps({"tenant": "acme"}),
    description="Every ninety seconds",
)
PeriodicTask.objects.create(name="quarter-hour-ny", task="proj.poll", crontab=quarter)
PeriodicTask.objects.create(name="first-monday-berlin", task="proj.digest", crontab=first_monday)
PeriodicTask.objects.create(name="disabled-hourly", task="proj.sweep", interval=hourly,
                            enabled=False)
PeriodicTask.objects.create(name="started-long-ago", task="proj.sweep", interval=hourly,
                            start_time=PAST)
PeriodicTask.objects.create(name="expired-one-off", task="proj.once", interval=hourly,
                            one_off=True, expires=PAST)
PeriodicTask.objects.create(name="ended", task="proj.once", interval=hourly, expires=PAST)
PeriodicTask.objects.create(name="ends-later", task="proj.once", interval=hourly, expires=FUTURE)
PeriodicTask.objects.create(name="starts-later", task="proj.once", interval=hourly,
                            start_time=FUTURE)
sunrise = SolarSchedule.objects.create(event="sunrise", latitude=52.52, longitude=13.40)
PeriodicTask.objects.create(name="at-sunrise", task="proj.lights", solar=sunrise)
clocked = ClockedSchedule.objects.create(clocked_time=FUTURE)
PeriodicTask.objects.create(name="clocked-once", task="proj.once", clocked=clocked, one_off=True)
clocked_past = ClockedSchedule.objects.create(clocked_time=PAST)
PeriodicTask.objects.create(name="clocked-past", task="proj.once", clocked=clocked_past,
                            one_off=True)
# what django-celery-beat leaves after running a one-off: disabled, its run counted
PeriodicTask.objects.create(name="clocked-ran", task="proj.once", clocked=clocked_past,
                            one_off=True, enabled=False, total_run_count=1)
PeriodicTask.objects.create(name="one-off-hourly", task="proj.once", interval=hourly,
                            one_off=True)
PeriodicTask.objects.create(name="one-off-monday", task="proj.digest", crontab=first_monday,
                            one_off=True)
PeriodicTask.objects.create(name="bad-args", task="proj.report", interval=every90,
                            args="[1, oops")
print(PeriodicTask.objects.count())
"""

SQLALCHEMY = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
from datetime import datetime, timezone
from sqlalchemy_celery_beat.models import (
    ClockedSchedule, CrontabSchedule, IntervalSchedule, Period, PeriodicTask, SolarSchedule,
)
from sqlalchemy_celery_beat.session import SessionManager

url, schema = sys.argv[1], (sys.argv[2] or None)
manager = SessionManager()
engine, Session = manager.create_session(url, schema=schema)
manager.prepare_models(engine, schema=schema)
session = Session()
PAST = datetime(2024, 1, 1, tzinfo=timezone.utc)
FUTURE = datetime(2099, 1, 1, tzinfo=timezone.utc)

def add(*objects):
    session.add_all(objects)
    session.commit()
    return objects[0]

every90 = add(IntervalSchedule(every=90, period=Period.SECONDS))
hourly = add(IntervalSchedule(every=1, period=Period.HOURS))
quarter = add(CrontabSchedule(minute="*/15", hour="9-17", day_of_week="*", day_of_month="*",
                              month_of_year="*", timezone="Asia/Kathmandu"))
first_monday = add(CrontabSchedule(minute="0", hour="8", day_of_week="1", day_of_month="1-7",
                                   month_of_year="*", timezone="Europe/Berlin"))
sunrise = add(SolarSchedule(event="sunrise", latitude=52.52, longitude=13.40))
clocked = add(ClockedSchedule(clocked_time=FUTURE))
add(
    PeriodicTask(name="every-90s", task="proj.report", schedule_model=every90,
                 args=json.dumps([1, "two"]), kwargs=json.dumps({"depth": {"max": 3}}),
                 queue="reports", exchange="reports-ex", routing_key="reports.rk", priority=7,
                 expire_seconds=300, headers=json.dumps({"tenant": "acme"}),
                 description="Every ninety seconds"),
    PeriodicTask(name="quarter-hour-ktm", task="proj.poll", schedule_model=quarter),
    PeriodicTask(name="first-monday-berlin", task="proj.digest", schedule_model=first_monday),
    PeriodicTask(name="disabled-hourly", task="proj.sweep", schedule_model=hourly,
                 enabled=False),
    PeriodicTask(name="expired-one-off", task="proj.once", schedule_model=hourly, one_off=True,
                 expires=PAST),
    PeriodicTask(name="at-sunrise", task="proj.lights", schedule_model=sunrise),
    PeriodicTask(name="clocked-once", task="proj.once", schedule_model=clocked, one_off=True),
    PeriodicTask(name="one-off-hourly", task="proj.once", schedule_model=hourly, one_off=True),
)
print(session.query(PeriodicTask).count())
"""

REDBEAT = r"""
import sys, warnings
from celery import Celery
from celery.schedules import crontab, schedule
from redbeat import RedBeatSchedulerEntry
from redbeat.schedules import rrule

app = Celery("peer", set_as_current=False)
app.conf.update(redbeat_redis_url=sys.argv[1], timezone="Europe/Berlin", broker_url=sys.argv[1])
def save(name, task, sched, **kw):
    RedBeatSchedulerEntry(name, task, sched, app=app, **kw).save()

save("every-45s", "proj.report", schedule(45), args=[1, "two"], kwargs={"depth": {"max": 3}},
     options={"queue": "reports", "priority": 3, "expires": 30, "headers": {"tenant": "acme"}})
save("quarter-hour-berlin", "proj.poll", crontab(minute="*/15", hour="9-17"))
save("first-monday", "proj.digest", crontab(minute=0, hour=8, day_of_month="1-7",
                                             day_of_week="mon"))
save("disabled-minutely", "proj.sweep", schedule(60), enabled=False)
save("daily-rrule", "proj.rr", rrule("DAILY", count=3))
print("ok")
"""


def _run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def django_database(url: str) -> dict[str, Any]:
    """Django's DATABASES entry for a SQLAlchemy URL (SQLite file or PostgreSQL)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": parsed.database}
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parsed.database,
        "USER": parsed.username or "",
        "PASSWORD": parsed.password or "",
        "HOST": parsed.host or "",
        "PORT": str(parsed.port or ""),
    }


def write_django(url: str) -> int:
    """Migrate django-celery-beat into the database at ``url`` and create the story's tasks."""
    return int(_run(DJANGO, json.dumps(django_database(url))))


def write_sqlalchemy(url: str, schema: str | None = None) -> int:
    """Create sqlalchemy-celery-beat's tables (in ``schema``) and the story's tasks."""
    return int(_run(SQLALCHEMY, url, schema or ""))


def write_redbeat(redis_url: str) -> None:
    """Save the story's RedBeat entries with ``RedBeatSchedulerEntry(...).save()``."""
    _run(REDBEAT, redis_url)


# -- what the tests compare against ------------------------------------------------------------
def celery_next_runs(fields: dict[str, Any], zone: str, after: datetime, count: int) -> list[int]:
    """The next ``count`` runs after ``after`` as Celery's own ``crontab`` computes them in
    ``zone`` (UTC epoch ms), one ``remaining_delta`` step after another."""
    from zoneinfo import ZoneInfo

    from celery import Celery
    from celery.schedules import crontab

    app = Celery("reference", set_as_current=False)
    app.conf.timezone = zone
    schedule = crontab(app=app, **fields)
    runs, last = [], after.astimezone(ZoneInfo(zone))
    for _ in range(count):
        last_in_zone, delta, _now = schedule.remaining_delta(last)
        last = last_in_zone + delta
        runs.append(int(last.astimezone(timezone.utc).timestamp() * 1000))
    return runs


def one_off_anchors(url: str, table: str) -> dict[str, datetime]:
    """``date_changed`` of each ``one_off`` task in the peer's table (naive is UTC): what the
    importer counts a one-off's next occurrence from."""
    import sqlalchemy as sa

    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            inspector = sa.inspect(conn)
            schema = next(
                (s for s in inspector.get_schema_names() if inspector.has_table(table, schema=s)),
                None,
            )
            rows = sa.Table(table, sa.MetaData(), autoload_with=conn, schema=schema)
            found = conn.execute(sa.select(rows.c.name, rows.c.date_changed)).all()
    finally:
        engine.dispose()
    return {
        str(name): (when if when.tzinfo else when.replace(tzinfo=timezone.utc))
        for name, when in found
        if isinstance(when, datetime)
    }


def store_rows(store_url: str) -> list[dict[str, Any]]:
    """Every row of the durable store's schedules table, to prove a run wrote nothing."""
    import sqlalchemy as sa

    engine = sa.create_engine(store_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            table = sa.Table("durable_beat_schedules", sa.MetaData(), autoload_with=conn)
            return [dict(r._mapping) for r in conn.execute(sa.select(table).order_by(table.c.id))]
    finally:
        engine.dispose()
