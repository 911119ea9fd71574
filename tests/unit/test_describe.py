"""The schedule in words, as ``show`` prints it: one table of cron and interval shapes."""

from __future__ import annotations

import pytest

from celery_durable_beat.schedules.describe import describe, describe_interval
from celery_durable_beat.schedules.spec import parse_schedule

pytestmark = pytest.mark.unit

CRON_CASES = [
    ("0 3 * * *", "Europe/Berlin", "at 03:00 every day (Europe/Berlin)"),
    ("30 2 * * *", "America/New_York", "at 02:30 every day (America/New_York)"),
    ("CRON_TZ=Asia/Kathmandu 45 5 * * *", "UTC", "at 05:45 every day (Asia/Kathmandu)"),
    ("0 8,12,18 * * *", "UTC", "at 08:00, 12:00 and 18:00 every day (UTC)"),
    ("30 0 3 * * *", "UTC", "at 03:00:30 every day (UTC)"),
    ("* * * * *", "UTC", "every minute (UTC)"),
    ("*/15 * * * *", "UTC", "every 15 minutes (UTC)"),
    ("0 * * * *", "UTC", "every hour at :00 (UTC)"),
    ("@hourly", "UTC", "every hour at :00 (UTC)"),
    ("0,30 * * * *", "UTC", "every hour at :00 and :30 (UTC)"),
    ("0 */2 * * *", "UTC", "every 2 hours at :00 (UTC)"),
    ("10-20 * * * *", "UTC", "every minute from :10 to :20 past the hour (UTC)"),
    ("*/10 * * * * *", "UTC", "every 10 seconds (UTC)"),
    ("* * * * * *", "UTC", "every second (UTC)"),
    ("5 * * * * *", "UTC", "every minute at second 5 (UTC)"),
    (
        "0 9-17 * * 1-5",
        "Europe/Berlin",
        "every hour at :00 from 09:00 to 17:00 on Monday to Friday (Europe/Berlin)",
    ),
    (
        "*/15 9-17 * * mon-fri",
        "UTC",
        "every 15 minutes from 09:00 to 17:45 on Monday to Friday (UTC)",
    ),
    ("0 0-23/6 * * *", "UTC", "every hour at :00 during hours 0, 6, 12 and 18 (UTC)"),
    ("@daily", "UTC", "at 00:00 every day (UTC)"),
    ("@weekly", "UTC", "at 00:00 on Sunday (UTC)"),
    ("5 4 * * 7", "UTC", "at 04:05 on Sunday (UTC)"),
    ("15 10 * * 1,3,5", "UTC", "at 10:15 on Monday, Wednesday and Friday (UTC)"),
    ("@monthly", "UTC", "at 00:00 on day 1 of the month (UTC)"),
    ("0 0 1,15 * *", "UTC", "at 00:00 on days 1 and 15 of the month (UTC)"),
    ("0 0 1-7 * *", "UTC", "at 00:00 on days 1-7 of the month (UTC)"),
    ("@yearly", "UTC", "at 00:00 on January 1 (UTC)"),
    ("0 0 * jan-mar *", "UTC", "at 00:00 in January to March (UTC)"),
    (
        "0 0 1 1,4,7,10 *",
        "UTC",
        "at 00:00 on day 1 of the month in January, April, July and October (UTC)",
    ),
    # classic cron: a restricted day of month and weekday combine with "or"
    ("0 0 1 * 1", "UTC", "at 00:00 on day 1 of the month or on Monday (UTC)"),
    # forms this module does not put into words fall back to the expression itself
    ("0 0 L * *", "UTC", "at 00:00 on the last day of the month (UTC)"),
    ("0 0 15W * *", "UTC", 'cron "0 0 15W * *" (UTC)'),
]


@pytest.mark.parametrize(("expr", "tz", "words"), CRON_CASES)
def test_cron_in_words(expr: str, tz: str, words: str) -> None:
    assert describe(parse_schedule(expr, tz).spec) == words


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (30, "every 30 seconds"),
        (1, "every second"),
        (60, "every minute"),
        (90, "every 90 seconds"),
        (3600, "every hour"),
        (7200, "every 2 hours"),
        (86400, "every day"),
        ("@every 15m", "every 15 minutes"),
        ("@every:1500", "every 1.5 seconds"),
        ("@every:250", "every 250 milliseconds"),
        ("@every:1", "every millisecond"),
    ],
)
def test_interval_in_words(value: object, words: str) -> None:
    assert describe(parse_schedule(value).spec) == words


def test_interval_words_name_no_zone() -> None:
    """An interval is aligned to the epoch, not to a zone, so no zone is named."""
    assert "(" not in describe_interval(30_000)
