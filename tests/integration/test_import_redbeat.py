"""``import --from redbeat``: entries saved with ``RedBeatSchedulerEntry(...).save()``.

RedBeat reads a crontab in its app's ``timezone`` (the JSON keeps no zone): the peer app and
the importing app both use Europe/Berlin, and the imported crontab's next ticks are Celery's in
that zone.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timezone

import pytest
import redis
from celery import Celery

from celery_durable_beat import DurableBeat
from celery_durable_beat.exceptions import ImportSourceError
from celery_durable_beat.importers import import_schedules
from tests.support.peers import celery_next_runs, store_rows, write_redbeat

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

KIND = "redbeat"
AFTER = datetime(2026, 6, 1, 12, 7, tzinfo=timezone.utc)
EXPECTED = {
    "broken": "refused: unreadable: definition is not JSON",
    "daily-rrule": "created",
    "disabled-minutely": "created",
    "every-45s": "created",
    "evicted": "refused: unreadable: listed in redbeat::schedule but its hash",
    "first-monday": "created",
    "quarter-hour-berlin": "created",
}


@pytest.fixture
def beat(sqlite_url: str) -> Iterator[DurableBeat]:
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(durable_beat_url=sqlite_url, timezone="Europe/Berlin")
    with DurableBeat(app) as control:
        yield control


def test_import_maps_refuses_and_is_idempotent(
    redis_url: str, beat: DurableBeat, sqlite_url: str
) -> None:
    write_redbeat(redis_url)
    client = redis.Redis.from_url(redis_url)
    client.hset("redbeat:broken", "definition", "{not json")
    client.zadd("redbeat::schedule", {"redbeat:evicted": 0})
    client.close()

    assert import_schedules(beat, KIND, redis_url, dry_run=True).totals()["created"] == 5
    assert beat.list() == []
    report = import_schedules(beat, KIND, redis_url)
    lines = dict(line.split(": ", 1) for line in report.text()[:-1])
    assert set(lines) == set(EXPECTED)
    for name, expected in EXPECTED.items():
        assert lines[name].startswith(expected), (name, lines[name])

    every = beat.store.get("every-45s")
    assert every is not None
    assert (every.definition.task, beat.get("every-45s").schedule) == ("proj.report", "@every 45s")
    assert list(every.definition.args) == [1, "two"]
    assert dict(every.definition.kwargs) == {"depth": {"max": 3}}
    assert dict(every.definition.options) == {
        "queue": "reports",
        "priority": 3,
        "expires": 30,
        "headers": {"tenant": "acme"},
    }
    assert beat.get("disabled-minutely").state == "paused"
    # rrule("DAILY", count=3): its dtstart is RedBeat's "now" when it was made (in UTC: the
    # rrule names no app), kept as an instant and a UTC offset; the RFC 5545 rule starts there
    # (every rrule part: tests/integration/test_import_solar_rrule.py)
    daily = beat.get("daily-rrule")
    assert daily.kind == "rrule"
    assert re.fullmatch(r"DTSTART;TZID=UTC:\d{8}T\d{6}\nRRULE:FREQ=DAILY;COUNT=3", daily.schedule)
    assert len(beat.next_ticks("daily-rrule", 5)) == 2  # the first of the three is past

    quarter = beat.get("quarter-hour-berlin")
    assert (quarter.tz, quarter.schedule) == ("Europe/Berlin", "*/15 9-17 * * *")
    ours = [t.tick_ms for t in beat.next_ticks("quarter-hour-berlin", 5, after=AFTER)]
    assert ours == celery_next_runs({"minute": "*/15", "hour": "9-17"}, "Europe/Berlin", AFTER, 5)
    monday = {"minute": "0", "hour": "8", "day_of_month": "1-7", "day_of_week": "mon"}
    ours = [t.tick_ms for t in beat.next_ticks("first-monday", 3, after=AFTER)]
    assert ours == celery_next_runs(monday, "Europe/Berlin", AFTER, 3)

    before = store_rows(sqlite_url)
    again = import_schedules(beat, KIND, redis_url)
    assert again.totals() == {"created": 0, "updated": 0, "unchanged": 5, "refused": 2}
    assert store_rows(sqlite_url) == before


def test_unreachable_or_empty_redis_is_one_error_and_writes_nothing(
    redis_url: str, beat: DurableBeat
) -> None:
    with pytest.raises(ImportSourceError, match="does not answer"):
        import_schedules(beat, KIND, "redis://:s3cret@127.0.0.1:1/0")
    with pytest.raises(ImportSourceError, match="holds no RedBeat entries"):
        import_schedules(beat, KIND, redis_url)
    write_redbeat(redis_url)
    with pytest.raises(ImportSourceError, match="no other:"):
        import_schedules(beat, KIND, redis_url + "?key_prefix=other:")
    assert beat.list() == []
