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
"""

from __future__ import annotations

import json
from collections.abc import Callable
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
    if not isinstance(schedule, (int, float, crontab)):
        raise Unreadable(f"schedule {schedule!r} is not an interval or a crontab")
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
    """A schedule decoded to something without a counterpart (rrule, unknown types)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _typed(obj: dict[str, Any]) -> Any:
    """RedBeat's typed JSON objects, decoded without RedBeat."""
    kind = obj.get("__type__")
    decode = _DECODERS.get(kind) if isinstance(kind, str) else None
    if kind is None or kind == "weekday":  # weekday: only inside an rrule, refused whole
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


def _rrule(obj: dict[str, Any]) -> _Refused:
    del obj
    return _Refused("rrule schedules have no counterpart (use a cron expression)")


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
