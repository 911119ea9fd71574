"""RedBeat: its entries, read from Redis with redis-py (RedBeat itself is not needed).

RedBeat keeps one hash per entry, ``<prefix><name>``, whose ``definition`` field is JSON with
typed objects (``{"__type__": "interval" | "crontab" | "rrule" | "datetime", ...}``), and a
sorted set ``<prefix>:schedule`` of those keys scored by their next due time. The prefix is
``redbeat:`` unless the app set ``redbeat_key_prefix``; give it as ``?key_prefix=...`` on the
URL (it is taken off before connecting).

Both are read: the sorted set's members and every hash under the prefix, so an entry missing
from either is still found; a member whose hash is gone (evicted) is an unreadable entry.
A RedBeat crontab carries no zone of its own: RedBeat reads it in the app's zone (Celery's
``app.timezone``: ``timezone``, on a Django project its ``TIME_ZONE``), and so does the imported
entry (no ``tz`` given: the app's zone, read by the same rule, is the default).

An ``rrule`` becomes its RFC 5545 text (SPEC §18), written so that python-dateutil's
``rrulestr`` gives the occurrences dateutil gives for the rule RedBeat decodes from the same
JSON, which is the one RedBeat runs (it reloads every due entry from Redis):

- RedBeat stores ``dtstart`` and ``until`` as Unix seconds and a UTC offset in minutes, not a
  zone, so it runs the rule at that fixed offset all year. ``DTSTART`` always names the zone
  the rule is expanded in (this package expands a rule on the wall times of the ``TZID``, else
  of the entry's ``tz``, so a bare ``...Z`` would be read in the app's zone, DST and all):
  offset 0 is ``TZID=UTC``; a whole-hour offset the IANA zone fixed at it (``+01:00`` is
  ``TZID=Etc/GMT-1``: POSIX signs); any other offset is ``UTC`` when the rule only repeats a
  fixed length of time (weekly or finer, no ``BY*`` part, where a shift of zone moves
  nothing), else refused, as no zone name has that offset for certain. ``UNTIL`` is an
  instant, written in UTC (``...Z``).
- RedBeat stores a ``weekday`` as ``{"__type__": "weekday", "wkday": 4}``, dropping its ``n``
  (``FR(-1)`` is read back, and run, as every Friday): written as stored, ``-1FR`` only when
  the JSON carries ``n`` and the rule is monthly or yearly (dateutil ignores ``n`` in weekly
  and finer rules, which RFC 5545 does not allow it in).
- ``byeaster`` (days from Easter Sunday) is dateutil's own, with no RFC 5545 counterpart;
  ``count`` with ``until`` is what RFC 5545 forbids (dateutil warns and stops at whichever
  comes first); an empty ``BY*`` list is what dateutil reads unlike an absent one: refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit
from zoneinfo import ZoneInfo

from celery.schedules import crontab

from celery_durable_beat.exceptions import ImportSourceError, InvalidArgument
from celery_durable_beat.importers.base import PeerEntry, Unreadable
from celery_durable_beat.urls import redact_url

KIND = "redbeat"
DEFAULT_PREFIX = "redbeat:"
_CRON_KEYS = ("minute", "hour", "day_of_week", "day_of_month", "month_of_year")
_FREQS = ("YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY", "MINUTELY", "SECONDLY")
"""dateutil's frequency constants, 0 to 6, as RedBeat stores them."""
_DAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
_BY_DATE = ("bysetpos", "bymonth", "bymonthday", "byyearday", "byweekno")
_BY_TIME = ("byhour", "byminute", "bysecond")
_WEEKLY = _FREQS.index("WEEKLY")


def read_entries(url: str, now: datetime) -> list[PeerEntry]:
    """Every RedBeat entry, in name order, as an entry or a refusal (``now`` is unused: RedBeat
    has no bounds to compare with it)."""
    del now
    plain, prefix = split_prefix(url)
    client = _client(plain)
    try:
        raw = _read(client, url, prefix)
    finally:
        client.close()
    return sorted((_entry(key, prefix, value) for key, value in raw), key=lambda e: e.name)


def split_prefix(url: str) -> tuple[str, str]:
    """The URL without ``key_prefix`` and the prefix (``redbeat:`` when not given)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    prefix = next((v for k, v in query if k == "key_prefix"), DEFAULT_PREFIX)
    rest = urlencode([(k, v) for k, v in query if k != "key_prefix"])
    return urlunsplit(parts._replace(query=rest)), prefix


def _client(url: str) -> Any:
    try:
        import redis
    except ImportError as exc:  # pragma: no cover - the redis extra is missing
        raise InvalidArgument(
            f"importing from RedBeat needs redis-py ({exc.name} is missing): "
            "pip install 'celery_durable_beat[redis]'"
        ) from None
    try:
        return redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=10)
    except ValueError as exc:
        raise InvalidArgument(
            f"{redact_url(url)} is not a Redis URL ({exc}); give e.g. redis://host:6379/0"
        ) from None


def _read(client: Any, url: str, prefix: str) -> list[tuple[str, bytes | None]]:
    import redis

    schedule_key = prefix + ":schedule"
    try:
        client.ping()
        keys = {_text(k) for k in client.zrange(schedule_key, 0, -1)}
        pattern = _glob_escape(prefix) + "*"
        keys |= {_text(k) for k in client.scan_iter(match=pattern, _type="HASH", count=500)}
        keys = {k for k in keys if k != schedule_key}
        if not keys:
            raise ImportSourceError(
                f"{redact_url(url)} holds no RedBeat entries (no {prefix}* hashes, no "
                f"{schedule_key}); is it the right database, and the right key prefix "
                "(?key_prefix=...)?"
            )
        with client.pipeline(transaction=False) as pipe:
            for key in sorted(keys):
                pipe.hget(key, "definition")
            definitions = pipe.execute()
    except redis.RedisError as exc:
        raise ImportSourceError(
            f"the RedBeat Redis at {redact_url(url)} does not answer: {exc}"
        ) from None
    return list(zip(sorted(keys), definitions, strict=True))


def _entry(key: str, prefix: str, definition: bytes | None) -> PeerEntry:
    fallback = key[len(prefix) :] if key.startswith(prefix) else key
    try:
        if definition is None:
            raise Unreadable(f"listed in {prefix}:schedule but its hash {key} is missing")
        try:
            data = json.loads(definition, object_hook=_typed)
        except ValueError as exc:
            raise Unreadable(f"definition is not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise Unreadable("definition is not a JSON object")
        name = str(data.get("name") or fallback)
        return _mapped(name, data)
    except Unreadable as exc:
        return PeerEntry.refuse(fallback, f"unreadable: {exc}")


def _mapped(name: str, data: dict[str, Any]) -> PeerEntry:
    schedule = data.get("schedule")
    if isinstance(schedule, _Refused):
        return PeerEntry.refuse(name, schedule.reason)
    if isinstance(schedule, _Rule):
        schedule = schedule.text
    elif not isinstance(schedule, (int, float, crontab)):
        raise Unreadable(f"schedule {schedule!r} is not an interval, a crontab or an rrule")
    options = data.get("options") or {}
    if not isinstance(options, dict):
        raise Unreadable("options is not an object")
    for key, value in options.items():
        if isinstance(value, datetime):
            return PeerEntry.refuse(
                name,
                f"options.{key} is a fixed instant ({value.isoformat()}), which every future "
                "tick would carry; give seconds instead",
            )
    entry: dict[str, Any] = {
        "task": data.get("task"),
        "schedule": schedule,
        "args": list(data.get("args") or []),
        "kwargs": dict(data.get("kwargs") or {}),
        "enabled": bool(data.get("enabled", True)),
    }
    if options:
        entry["options"] = options
    return PeerEntry(name, entry)


class _Refused:
    """A schedule decoded to something without a counterpart (byeaster, unknown types)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


@dataclass(frozen=True)
class _Rule:
    """An ``rrule`` as its RFC 5545 text: kept apart from a plain JSON string, which RedBeat
    never stores as a schedule and is not taken for one."""

    text: str


class _NoCounterpart(Exception):
    """A well-formed rrule part that RFC 5545 cannot say; the entry is refused with it."""


def _typed(obj: dict[str, Any]) -> Any:
    """RedBeat's typed JSON objects, decoded without RedBeat."""
    kind = obj.get("__type__")
    decode = _DECODERS.get(kind) if isinstance(kind, str) else None
    if kind is None or kind == "weekday":  # weekday: only inside an rrule, read there
        return obj
    if decode is None:
        return _Refused(f"schedule type {kind!r} is not one RedBeat stores by default")
    return decode(obj)


def _interval(obj: dict[str, Any]) -> float | int:
    """``relative`` rounds to the interval's resolution: ours are epoch-aligned anyway."""
    every = float(obj["every"])
    return int(every) if every == int(every) else every


def _crontab(obj: dict[str, Any]) -> crontab:
    try:
        return crontab(**{k: obj.get(k, "*") for k in _CRON_KEYS})
    except (ValueError, TypeError) as exc:
        raise Unreadable(f"crontab fields are not valid ({exc})") from None


def _rrule(obj: dict[str, Any]) -> _Rule | _Refused:
    try:
        return _Rule(rrule_text(obj))
    except _NoCounterpart as exc:
        return _Refused(str(exc))


def rrule_text(obj: Mapping[str, Any]) -> str:
    """RedBeat's ``{"__type__": "rrule", ...}`` as RFC 5545 lines (module docstring: how each
    part is written and what is refused). Raises _NoCounterpart, Unreadable."""
    if obj.get("byeaster") is not None:
        raise _NoCounterpart(_BYEASTER.format(obj["byeaster"]))
    if obj.get("count") is not None and obj.get("until") is not None:
        raise _NoCounterpart(_COUNT_AND_UNTIL.format(obj["count"]))
    freq = _freq(obj.get("freq"))
    parts = [f"FREQ={_FREQS[freq]}"]
    interval = _whole(obj.get("interval", 1), "interval")
    if interval != 1:
        parts.append(f"INTERVAL={interval}")
    if obj.get("wkst") is not None:
        parts.append(f"WKST={_day(obj['wkst'], 'wkst', ordinal=False)}")
    if obj.get("count") is not None:
        parts.append(f"COUNT={_whole(obj['count'], 'count')}")
    until = _instant(obj, "until")
    if until is not None:
        parts.append(f"UNTIL={_wall(until.astimezone(timezone.utc))}Z")
    ordinal = freq < _WEEKLY  # dateutil drops a weekday's n in weekly and finer rules
    by = {key: _values(obj, key, ordinal=ordinal) for key in (*_BY_DATE, "byweekday", *_BY_TIME)}
    for key, values in by.items():
        if values is not None:
            name = "BYDAY" if key == "byweekday" else key.upper()
            parts.append(f"{name}={','.join(values)}")
    rule = "RRULE:" + ";".join(parts)
    start = _instant(obj, "dtstart")
    if start is None:  # RedBeat always stores one; without it the entry's tz reads the rule
        return rule
    shiftable = freq >= _WEEKLY and all(v is None for v in by.values())
    return f"{_dtstart(start, shiftable=shiftable)}\n{rule}"


_BYEASTER = (
    "rrule byeaster={} (days from Easter Sunday) is python-dateutil's own, with no RFC 5545 "
    "counterpart; give the dates instead (@at schedules, or an RRULE with RDATE lines)"
)
_COUNT_AND_UNTIL = (
    "rrule count={} together with until: RFC 5545 allows one of the two (dateutil stops at "
    "whichever comes first); keep the one that ends it first"
)


def _dtstart(start: datetime, *, shiftable: bool) -> str:
    """``DTSTART`` in the zone the rule runs in: an IANA zone by its name; RedBeat's fixed
    offset (module docstring) as UTC, the ``Etc/GMT`` zone of that offset, or refused."""
    key = getattr(start.tzinfo, "key", None)
    if isinstance(key, str) and key:
        return f"DTSTART;TZID={key}:{_wall(start)}"
    offset = start.utcoffset() or timedelta(0)
    if not offset or shiftable:
        return f"DTSTART;TZID=UTC:{_wall(start.astimezone(timezone.utc))}"
    hours, rest = divmod(int(offset.total_seconds()), 3600)
    if rest or not -12 <= hours <= 14:  # Etc/GMT+12 (UTC-12) to Etc/GMT-14 (UTC+14)
        raise _NoCounterpart(
            f"rrule dtstart {start.isoformat()} is at a fixed UTC offset no zone name is fixed "
            "at (RedBeat keeps the offset, not the zone), and the rule's BY parts or frequency "
            "depend on it; import it by hand with DTSTART;TZID=<its zone>"
        )
    return f"DTSTART;TZID=Etc/GMT{-hours:+d}:{_wall(start)}"


def _wall(moment: datetime) -> str:
    """RFC 5545's local date-time form; seconds only, as dateutil drops microseconds."""
    return (
        f"{moment.year:04d}{moment.month:02d}{moment.day:02d}"
        f"T{moment.hour:02d}{moment.minute:02d}{moment.second:02d}"
    )


def _instant(obj: Mapping[str, Any], key: str) -> datetime | None:
    """``dtstart``/``until`` as RedBeat decodes them: Unix seconds at the offset ``<key>_tz``
    (minutes; 0 or none is UTC), or a typed datetime already decoded."""
    value = obj.get(key)
    if value is None or isinstance(value, datetime):
        return value
    minutes = obj.get(f"{key}_tz") or 0
    shown = f"rrule {key}={value!r} at {key}_tz={minutes!r} minutes"
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (value, minutes)):
        raise Unreadable(f"{shown} is not Unix seconds at an offset in minutes")
    try:
        zone = timezone(timedelta(minutes=minutes)) if minutes else timezone.utc
        return datetime.fromtimestamp(value, tz=zone)
    except (ValueError, OverflowError, OSError) as exc:
        raise Unreadable(f"{shown} is not an instant ({exc})") from None


def _freq(value: object) -> int:
    if isinstance(value, str) and value.upper() in _FREQS:
        return _FREQS.index(value.upper())
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(_FREQS):
        return value
    raise Unreadable(f"rrule freq={value!r} is not one of dateutil's YEARLY (0) to SECONDLY (6)")


def _whole(value: object, key: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise Unreadable(f"rrule {key}={value!r} is not a whole number")


def _values(obj: Mapping[str, Any], key: str, *, ordinal: bool) -> list[str] | None:
    """A ``BY*`` part as RFC 5545 values: None when absent; one value or a list of them
    (weekdays with their ``n`` when ``ordinal``)."""
    value = obj.get(key)
    if value is None:
        return None
    items = value if isinstance(value, list) else [value]
    if not items:
        raise _NoCounterpart(
            f"rrule {key}=[] is an empty list, which dateutil reads unlike no {key} and RFC "
            f"5545 cannot write; remove {key} or give its values"
        )
    if key == "byweekday":
        return [_day(item, key, ordinal=ordinal) for item in items]
    return [str(_whole(item, key)) for item in items]


def _day(value: object, key: str, *, ordinal: bool) -> str:
    """A weekday, as RedBeat stores it (0-6, or ``{"__type__": "weekday", "wkday": 4}``, with
    ``n`` when the JSON has one) as ``FR`` or ``-1FR``."""
    n: object = None
    if isinstance(value, dict) and value.get("__type__") == "weekday":
        n = value.get("n")
        value = value.get("wkday")
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < len(_DAYS):
        raise Unreadable(f"rrule {key} has {value!r}, not a weekday 0 (MO) to 6 (SU)")
    if n is None or not ordinal:
        return _DAYS[value]
    if not isinstance(n, int) or isinstance(n, bool) or n == 0:
        raise Unreadable(f"rrule {key} has a weekday n={n!r}, not a nonzero whole number")
    return f"{n}{_DAYS[value]}"


def _datetime(obj: dict[str, Any]) -> datetime:
    zone = obj.get("timezone", "UTC")
    fields = {k: obj[k] for k in ("year", "month", "day", "hour", "minute", "second")}
    tz = (
        timezone(timedelta(seconds=float(zone)))
        if isinstance(zone, (int, float))
        else ZoneInfo(str(zone))
    )
    return datetime(**fields, microsecond=obj.get("microsecond", 0), tzinfo=tz)


_DECODERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "interval": _interval,
    "crontab": _crontab,
    "datetime": _datetime,
    "rrule": _rrule,
}


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
