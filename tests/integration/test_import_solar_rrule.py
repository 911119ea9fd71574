"""Solar schedules and RedBeat rrules carried by ``import`` (SPEC §12, §18), not refused.

The peer data is written by the peers' own code in a child process, as in
``tests/support/peers.py``: django-celery-beat's ORM after its migrations, sqlalchemy-celery-beat's
models, ``RedBeatSchedulerEntry(...).save()`` on the real Redis. Each test checks two layers:
what the reader makes of the peer's rows (``read_entries``: the exact schedule text), and that
the import carries it (``created``, ``check`` accepting the same text in ``beat_schedule``, the
next ticks those of the peer's own arithmetic: Celery's ``solar``, to the second a tick is
truncated to; dateutil's ``rrule`` behind RedBeat's, exactly).

RedBeat's JSON keeps an rrule's ``dtstart`` as a UTC offset, not a zone, and a weekday without
its ``n``; what RedBeat runs is the rule it decodes from that JSON (it reloads each due entry
from Redis), so the reference is the entry RedBeat's own ``from_key`` reads back. Where that
differs from the rule the user wrote, the test says so (``test_redbeat_rrules_...``).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from dateutil.rrule import rrulestr

from celery_durable_beat import DurableBeat
from celery_durable_beat.control import check_config
from celery_durable_beat.importers import import_schedules, read_entries
from tests.support.peers import django_database, one_off_anchors

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

AFTER = datetime(2026, 6, 1, 12, 7, tzinfo=timezone.utc)

DJANGO = r"""
import json, sys
from datetime import datetime, timezone
from decimal import Decimal
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
from django_celery_beat.models import PeriodicTask, SolarSchedule

PAST = datetime(2024, 1, 1, tzinfo=timezone.utc)
FUTURE = datetime(2099, 1, 1, tzinfo=timezone.utc)
sunset = SolarSchedule.objects.create(event="sunset", latitude=59.437, longitude=24.745)
dawn = SolarSchedule.objects.create(
    event="dawn_civil", latitude=Decimal("-33.868800"), longitude=Decimal("151.209300")
)
noon = SolarSchedule.objects.create(event="solar_noon", latitude=60, longitude=0)
PeriodicTask.objects.create(
    name="tallinn-sunset", task="proj.lights", solar=sunset,
    args=json.dumps([1, "two"]), kwargs=json.dumps({"room": "hall"}),
    queue="lights", exchange="lights-ex", routing_key="lights.rk", priority=5,
    expire_seconds=600, headers=json.dumps({"site": "tallinn"}),
    description="Lights on at sunset",
)
PeriodicTask.objects.create(name="sydney-dawn", task="proj.wake", solar=dawn, enabled=False,
                            expires=FUTURE)
PeriodicTask.objects.create(name="noon-later", task="proj.noon", solar=noon, start_time=FUTURE)
PeriodicTask.objects.create(name="one-off-sunset", task="proj.once", solar=sunset, one_off=True)
PeriodicTask.objects.create(name="expired-sunset", task="proj.once", solar=sunset, expires=PAST)
print(PeriodicTask.objects.count())
"""

SQLALCHEMY = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
from sqlalchemy_celery_beat.models import PeriodicTask, SolarSchedule
from sqlalchemy_celery_beat.session import SessionManager

url, schema = sys.argv[1], (sys.argv[2] or None)
manager = SessionManager()
engine, Session = manager.create_session(url, schema=schema)
manager.prepare_models(engine, schema=schema)
session = Session()
sunset = SolarSchedule(event="sunset", latitude=59.437, longitude=24.745)
noon = SolarSchedule(event="solar_noon", latitude=60, longitude=0)
session.add_all([sunset, noon])
session.commit()
session.add_all([
    PeriodicTask(name="tallinn-sunset", task="proj.lights", schedule_model=sunset,
                 args=json.dumps([1, "two"]), kwargs=json.dumps({"room": "hall"}),
                 queue="lights", priority=5, expire_seconds=600),
    PeriodicTask(name="paused-noon", task="proj.noon", schedule_model=noon, enabled=False),
])
session.commit()
print(session.query(PeriodicTask).count())
"""

REDBEAT = r"""
import json, sys, itertools, warnings
from datetime import datetime, timezone
from zoneinfo import ZoneInfo
from celery import Celery
from dateutil.rrule import FR, MO, WE
from redbeat import RedBeatSchedulerEntry
from redbeat.schedules import rrule

warnings.simplefilter("ignore")  # dateutil's DeprecationWarning for count with until
app = Celery("peer", set_as_current=False)
app.conf.update(redbeat_redis_url=sys.argv[1], timezone="Europe/Berlin", broker_url=sys.argv[1])
BERLIN, UTC = ZoneInfo("Europe/Berlin"), timezone.utc
KATHMANDU, NEW_YORK = ZoneInfo("Asia/Kathmandu"), ZoneInfo("America/New_York")
rules = {
    "last-friday": rrule("MONTHLY", dtstart=datetime(2026, 1, 2, 9, tzinfo=BERLIN),
                         byweekday=FR(-1), byhour=9, byminute=0, bysecond=0),
    "last-friday-setpos": rrule("MONTHLY", dtstart=datetime(2026, 1, 2, 9, tzinfo=UTC),
                                byweekday=FR, bysetpos=-1, byhour=9, byminute=0, bysecond=0),
    "mon-wed": rrule("WEEKLY", dtstart=datetime(2026, 7, 1, 7, 30, tzinfo=BERLIN),
                     byweekday=(MO, WE), byhour=7, byminute=30, bysecond=0),
    "every-2-days": rrule("DAILY", dtstart=datetime(2099, 1, 1, 6, tzinfo=UTC), interval=2,
                          count=5),
    "kathmandu-daily": rrule("DAILY", dtstart=datetime(2026, 3, 1, 6, tzinfo=KATHMANDU)),
    "kathmandu-9am": rrule("DAILY", dtstart=datetime(2026, 3, 1, 6, tzinfo=KATHMANDU),
                           byhour=9, byminute=0),
    "new-york-until": rrule("HOURLY", dtstart=datetime(2026, 3, 1, 6, tzinfo=NEW_YORK),
                            interval=6, byminute=(0, 30), until=datetime(2099, 1, 1, tzinfo=UTC)),
    "fortnightly-jan-jul": rrule("WEEKLY", dtstart=datetime(2026, 1, 1, 10, tzinfo=UTC),
                                 interval=2, wkst=6, byweekday=(1, 6), bymonth=(1, 7), byhour=10,
                                 byminute=0, bysecond=0),
    "easter-monday": rrule("YEARLY", dtstart=datetime(2026, 1, 1, 10, tzinfo=BERLIN),
                           byeaster=1),
    "count-and-until": rrule("DAILY", dtstart=datetime(2026, 1, 1, 10, tzinfo=UTC), count=3,
                             until=datetime(2099, 1, 1, tzinfo=UTC)),
    "empty-bymonth": rrule("YEARLY", dtstart=datetime(2026, 1, 1, 10, tzinfo=UTC), bymonth=[]),
}
written = {}
for name, rule in rules.items():
    RedBeatSchedulerEntry(name, "proj.rr", rule, app=app, kwargs={"rule": name}).save()
    written[name] = [int(d.timestamp()) for d in itertools.islice(rule.rrule, int(sys.argv[2]))]
print(json.dumps(written))
"""
READ_BACK = r"""
import json, sys, itertools
from celery import Celery
from redbeat import RedBeatSchedulerEntry

app = Celery("peer", set_as_current=False)
app.conf.update(redbeat_redis_url=sys.argv[1], timezone="Europe/Berlin", broker_url=sys.argv[1])
decoded = {}
for name in sys.argv[3:]:
    rule = RedBeatSchedulerEntry.from_key("redbeat:" + name, app=app).schedule.rrule
    decoded[name] = [int(d.timestamp()) for d in itertools.islice(rule, int(sys.argv[2]))]
print(json.dumps(decoded))
"""
N = 12
"""Occurrences compared per rule."""

REDBEAT_TEXTS = {
    # FR(-1) is stored as {"wkday": 4}: RedBeat reads it back, and runs it, as every Friday
    "last-friday": "DTSTART;TZID=Etc/GMT-1:20260102T090000\n"
    "RRULE:FREQ=MONTHLY;BYDAY=FR;BYHOUR=9;BYMINUTE=0;BYSECOND=0",
    "last-friday-setpos": "DTSTART;TZID=UTC:20260102T090000\n"
    "RRULE:FREQ=MONTHLY;BYSETPOS=-1;BYDAY=FR;BYHOUR=9;BYMINUTE=0;BYSECOND=0",
    "mon-wed": "DTSTART;TZID=Etc/GMT-2:20260701T073000\n"
    "RRULE:FREQ=WEEKLY;BYDAY=MO,WE;BYHOUR=7;BYMINUTE=30;BYSECOND=0",
    "every-2-days": "DTSTART;TZID=UTC:20990101T060000\nRRULE:FREQ=DAILY;INTERVAL=2;COUNT=5",
    # +05:45 is no Etc/GMT zone; a daily rule without BY parts is the same in UTC
    "kathmandu-daily": "DTSTART;TZID=UTC:20260301T001500\nRRULE:FREQ=DAILY",
    "new-york-until": "DTSTART;TZID=Etc/GMT+5:20260301T060000\n"
    "RRULE:FREQ=HOURLY;INTERVAL=6;UNTIL=20990101T000000Z;BYMINUTE=0,30",
    "fortnightly-jan-jul": "DTSTART;TZID=UTC:20260101T100000\n"
    "RRULE:FREQ=WEEKLY;INTERVAL=2;WKST=SU;BYMONTH=1,7;BYDAY=TU,SU;BYHOUR=10;BYMINUTE=0;"
    "BYSECOND=0",
}
REDBEAT_REFUSED = {
    "easter-monday": "rrule byeaster=1 (days from Easter Sunday) is python-dateutil's own, with "
    "no RFC 5545 counterpart",
    "kathmandu-9am": "rrule dtstart 2026-03-01T06:00:00+05:45 is at a fixed UTC offset no zone "
    "name is fixed at",
    "count-and-until": "rrule count=3 together with until: RFC 5545 allows one of the two",
    "empty-bymonth": "rrule bymonth=[] is an empty list, which dateutil reads unlike no bymonth",
}


def _child(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


@pytest.fixture
def beat(sqlite_url: str) -> Iterator[DurableBeat]:
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(durable_beat_url=sqlite_url, timezone="Europe/Berlin")
    with DurableBeat(app) as control:
        yield control


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/peer.sqlite3"
    return str(request.getfixturevalue("pg_url"))


def _entries(kind: str, url: str) -> dict[str, dict[str, Any]]:
    """What the reader makes of the peer: each carried entry by name."""
    return {e.name: e.entry for e in read_entries(kind, url) if e.entry is not None}


def _lines(beat: DurableBeat, kind: str, url: str) -> dict[str, str]:
    report = import_schedules(beat, kind, url)
    return dict(line.split(": ", 1) for line in report.text()[:-1])


def _accepted_by_check(sqlite_url: str, entries: Mapping[str, Mapping[str, Any]]) -> None:
    """The same schedule texts in ``beat_schedule``: ``check`` (beat's own validation) takes
    them, so the imported entry is one a user could have written in config."""
    app = Celery("proj", broker="memory://", set_as_current=False)
    beat_schedule = {n: {"task": e["task"], "schedule": e["schedule"]} for n, e in entries.items()}
    app.conf.update(durable_beat_url=sqlite_url, timezone="UTC", beat_schedule=beat_schedule)
    checked = check_config(app)
    assert checked.ok, str(checked.error())
    assert checked.schedules == len(entries)


def celery_solar_runs(event: str, lat: float, lon: float, after: datetime, count: int) -> list[int]:
    """The next ``count`` events after ``after`` as Celery's own ``solar`` (what
    django-celery-beat's ``SolarSchedule.schedule`` is) finds them, in UTC epoch ms."""
    from celery.schedules import solar

    app = Celery("reference", set_as_current=False)
    runs, last = [], after
    for _ in range(count):
        found = solar(event, lat, lon, app=app, nowfun=_fixed(last))
        last += found.remaining_estimate(last)
        runs.append(int(last.timestamp() * 1000))
    return runs


def _same_events(ours: list[int], celery: list[int]) -> bool:
    """Each tick within a second of Celery's event: a tick is the event truncated to the
    second, and PyEphem lands a few hundredths apart from another search start
    (``schedules/solar.py``), which Celery's search from each last run is."""
    if len(ours) != len(celery):
        return False
    return all(-100 < c - o < 1000 + 100 for o, c in zip(ours, celery, strict=True))


def _fixed(moment: datetime) -> Callable[[], datetime]:
    """A clock stopped at ``moment``: Celery's ``solar`` counts its estimate from ``now()``."""
    return lambda: moment


def test_django_solar_tasks_are_solar_schedules(
    database: str, beat: DurableBeat, sqlite_url: str
) -> None:
    assert int(_child(DJANGO, json.dumps(django_database(database)))) == 5
    read = _entries("django-celery-beat", database)
    schedules = {name: entry["schedule"] for name, entry in read.items()}
    assert schedules == {
        "one-off-sunset": "@solar sunset 59.437 24.745",  # made @at at upsert (base._as_at)
        "tallinn-sunset": "@solar sunset 59.437 24.745",
        "sydney-dawn": "@solar dawn_civil -33.8688 151.2093",
        "noon-later": "@solar solar_noon 60 0",
    }
    sunset = read["tallinn-sunset"]
    assert "tz" not in sunset  # an instant, the same in every zone
    assert sunset["args"] == [1, "two"] and sunset["kwargs"] == {"room": "hall"}
    assert sunset["options"] == {
        "queue": "lights",
        "exchange": "lights-ex",
        "routing_key": "lights.rk",
        "priority": 5,
        "headers": {"site": "tallinn"},
    }
    assert (sunset["expires"], sunset["description"]) == (600, "Lights on at sunset")
    assert read["sydney-dawn"]["enabled"] is False
    assert read["sydney-dawn"]["end_at"] == datetime(2099, 1, 1, tzinfo=timezone.utc)
    assert read["noon-later"]["start_at"] == datetime(2099, 1, 1, tzinfo=timezone.utc)

    lines = _lines(beat, "django-celery-beat", database)
    assert lines.pop("expired-sunset").startswith("refused: expired at 2024-01-01T00:00:00+00:00")
    carried = ("tallinn-sunset", "sydney-dawn", "noon-later", "one-off-sunset")
    assert lines == dict.fromkeys(carried, "created")
    _accepted_by_check(sqlite_url, {n: read[n] for n in ("tallinn-sunset", "sydney-dawn")})
    shown = beat.get("tallinn-sunset")
    assert (shown.kind, shown.schedule) == ("solar", "@solar sunset 59.437 24.745")
    assert beat.get("sydney-dawn").state == "paused"
    ours = [t.tick_ms for t in beat.next_ticks("tallinn-sunset", 3, after=AFTER)]
    assert _same_events(ours, celery_solar_runs("sunset", 59.437, 24.745, AFTER, 3)), ours

    # one_off: @at the first sunset after the task was saved, as for a one_off crontab
    saved = one_off_anchors(database, "django_celery_beat_periodictask")["one-off-sunset"]
    once = beat.get("one-off-sunset")
    assert once.kind == "at"
    assert once.next_tick_ms is not None
    assert _same_events([once.next_tick_ms], celery_solar_runs("sunset", 59.437, 24.745, saved, 1))

    again = import_schedules(beat, "django-celery-beat", database)
    assert again.totals() == {"created": 0, "updated": 0, "unchanged": 4, "refused": 1}


def test_sqlalchemy_solar_tasks_are_solar_schedules(
    database: str, beat: DurableBeat, sqlite_url: str
) -> None:
    schema = "" if database.startswith("sqlite") else "beat_tables"
    assert int(_child(SQLALCHEMY, database, schema)) == 2
    read = _entries("sqlalchemy-celery-beat", database)
    assert {name: entry["schedule"] for name, entry in read.items()} == {
        "tallinn-sunset": "@solar sunset 59.437 24.745",
        "paused-noon": "@solar solar_noon 60 0",
    }
    assert read["tallinn-sunset"]["options"] == {"queue": "lights", "priority": 5}
    assert read["tallinn-sunset"]["expires"] == 600
    assert read["paused-noon"]["enabled"] is False

    assert _lines(beat, "sqlalchemy-celery-beat", database) == {
        "paused-noon": "created",
        "tallinn-sunset": "created",
    }
    _accepted_by_check(sqlite_url, read)
    assert beat.get("tallinn-sunset").schedule == "@solar sunset 59.437 24.745"
    assert beat.get("paused-noon").state == "paused"
    ours = [t.tick_ms for t in beat.next_ticks("tallinn-sunset", 3, after=AFTER)]
    assert _same_events(ours, celery_solar_runs("sunset", 59.437, 24.745, AFTER, 3)), ours


def test_redbeat_rrules_are_rfc5545_rules_with_the_occurrences_redbeat_runs(
    redis_url: str, beat: DurableBeat, sqlite_url: str
) -> None:
    written = json.loads(_child(REDBEAT, redis_url, str(N)))
    _with_the_ordinal(redis_url, "last-friday", "last-friday-n")
    _with_the_ordinal(redis_url, "mon-wed", "mon-wed-n")  # weekly: dateutil ignores n
    texts = {
        **REDBEAT_TEXTS,
        "last-friday-n": REDBEAT_TEXTS["last-friday"].replace("=FR", "=-1FR"),
        "mon-wed-n": REDBEAT_TEXTS["mon-wed"],
    }
    decoded = json.loads(_child(READ_BACK, redis_url, str(N), *texts))  # what RedBeat runs
    read = _entries("redbeat", redis_url)
    assert {name: entry["schedule"] for name, entry in read.items()} == texts
    assert read["mon-wed"]["kwargs"] == {"rule": "mon-wed"}
    for name, text in texts.items():  # dateutil on our text, dateutil behind RedBeat's rrule
        ours = [int(d.timestamp()) for d in itertools.islice(rrulestr(text), N)]
        assert ours == decoded[name], name
    # RedBeat's JSON drops FR(-1)'s n (it runs every Friday) and Berlin's DST (it runs at the
    # offset dtstart had, +01:00, in summer too): what the user wrote differs from what RedBeat
    # runs, and the import carries what RedBeat runs. The other rules are the same either way.
    assert {n for n in REDBEAT_TEXTS if decoded[n] != written[n]} == {"last-friday"}
    assert decoded["last-friday-n"][:2] == written["last-friday"][:2]  # the DST change is later

    lines = _lines(beat, "redbeat", redis_url)
    for name, reason in REDBEAT_REFUSED.items():
        assert lines.pop(name).startswith(f"refused: {reason}"), name
    assert lines == dict.fromkeys(texts, "created")
    _accepted_by_check(sqlite_url, read)
    for name in texts:  # the beat's own ticks: the same instants, from the first on
        before = datetime.fromtimestamp(decoded[name][0] - 1, tz=timezone.utc)
        ticks = [t.tick_ms for t in beat.next_ticks(name, N, after=before)]
        assert ticks == [s * 1000 for s in decoded[name]], name
    assert len(decoded["every-2-days"]) == 5  # COUNT ends it

    again = import_schedules(beat, "redbeat", redis_url)
    assert again.totals() == {
        "created": 0,
        "updated": 0,
        "unchanged": len(texts),
        "refused": len(REDBEAT_REFUSED),
    }


def _with_the_ordinal(redis_url: str, name: str, copy: str) -> None:
    """A copy of RedBeat's hash for ``name`` whose weekdays keep ``"n": -1``, as RedBeat's
    decoder reads it (``weekday(**d)``) though its encoder never writes it: where the JSON
    has the ordinal, the import writes it (``-1FR``) in the rules dateutil reads it in."""
    client = redis.Redis.from_url(redis_url)
    try:
        definition = json.loads(client.hget(f"redbeat:{name}", "definition") or b"{}")
        definition["name"] = copy
        days = definition["schedule"]["byweekday"]
        for day in days if isinstance(days, list) else [days]:
            day["n"] = -1
        client.hset(f"redbeat:{copy}", "definition", json.dumps(definition))
    finally:
        client.close()
