"""Redis clients from Celery-style URLs: the one place that turns ``durable_beat_lease_url`` (and
the Redis URL the guard's claims share, ``runs/factory.py``) into a redis-py client.

SPEC §7: the lease URL takes what Celery's own Redis settings take, so a deployment names its
Redis once, in the form its operators already know:

- ``redis://[[user]:password@]host[:port][/db]`` and ``unix:///path/to/socket?db=0``;
- ``rediss://…`` (TLS), with ``ssl_cert_reqs`` (``required``, ``optional``, ``none``, or Celery's
  ``CERT_REQUIRED`` / ``CERT_OPTIONAL`` / ``CERT_NONE``), ``ssl_ca_certs``, ``ssl_certfile`` and
  ``ssl_keyfile`` in the query. Without ``ssl_cert_reqs`` the server's certificate is verified
  (redis-py's default): a TLS connection that trusts anyone is opted into, never defaulted to;
- ``sentinel://[:password@]host:port[/db];sentinel://host2:port2;…``, the master's name in the
  transport options (``master_name``, as in Celery's ``broker_transport_options``), with
  ``sentinel_kwargs`` for the sentinels' own connections (their password) and
  ``min_other_sentinels``. The password and db of the first URL are the master's, as Celery reads
  them.

A Sentinel client is redis-py's ``Sentinel(...).master_for(...)``: it asks the sentinels for the
master whenever it (re)connects, and a connection to a demoted master fails (``READONLY``) and
reconnects, so beat follows a failover without a restart. Its timeouts are split so one attempt
of a call stays within ``timeout`` as a plain client's does: half to ask every sentinel in turn,
half for the master itself.

Parsing is pure (redis is imported by ``connect`` only), so ``settings.py`` refuses a bad URL or a
sentinel URL without ``master_name`` when the process starts, not in its first round.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

SCHEMES = ("redis", "rediss", "unix", "sentinel")
SENTINEL_PORT = 26379
TRANSPORT_KEYS = ("master_name", "sentinel_kwargs", "min_other_sentinels")
"""The transport options a Redis client here reads; a Celery ``broker_transport_options`` holds
others too (``visibility_timeout``, …), which ``SentinelOptions.pick`` leaves out."""

TLS_QUERY = ("ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
CERT_REQS = {
    "required": "required",
    "optional": "optional",
    "none": "none",
    "cert_required": "required",
    "cert_optional": "optional",
    "cert_none": "none",
}
"""Celery's spellings of ``ssl_cert_reqs`` (``CERT_REQUIRED``, …) -> redis-py's."""

SETTING_URL = "durable_beat_lease_url"
SETTING_OPTIONS = "durable_beat_lease_transport_options"


@dataclass(frozen=True)
class SentinelOptions:
    """What a sentinel URL needs beside itself: the monitored master's name, and how to talk to
    the sentinels."""

    master_name: str
    sentinel_kwargs: dict[str, Any] = field(default_factory=dict)
    min_other_sentinels: int = 0

    @classmethod
    def pick(cls, options: Mapping[str, Any] | None) -> SentinelOptions | None:
        """The sentinel part of Celery-style transport options; None without ``master_name``."""
        options = options or {}
        name = options.get("master_name")
        if not isinstance(name, str) or not name:
            return None
        return cls(
            master_name=name,
            sentinel_kwargs=dict(options.get("sentinel_kwargs") or {}),
            min_other_sentinels=int(options.get("min_other_sentinels") or 0),
        )


@dataclass(frozen=True)
class SentinelUrl:
    """A ``;``-joined sentinel URL, parsed: the sentinels, and the master's db and credentials."""

    sentinels: tuple[tuple[str, int], ...]
    db: int = 0
    username: str | None = None
    password: str | None = None


def scheme_of(url: str) -> str:
    """The URL's scheme, lower-cased; empty when it has none."""
    head, sep, _ = url.partition("://")
    return head.strip().lower() if sep else ""


def is_redis_url(url: str) -> bool:
    """Whether ``connect`` takes this URL (by its scheme; the rest is checked by ``problem``)."""
    return scheme_of(url) in SCHEMES


def problem(
    url: str, options: Mapping[str, Any] | None, options_setting: str = SETTING_OPTIONS
) -> str | None:
    """What is wrong with a lease URL and its transport options, as the fix to make; None when
    ``connect`` can build a client of them. Never echoes a password. ``options_setting``: the
    transport options' name as the user writes it (``CELERY_DURABLE_BEAT_LEASE_TRANSPORT_OPTIONS``
    in Django settings), for the fix it names."""
    scheme = scheme_of(url)
    if scheme not in SCHEMES:
        return (
            f"uses {scheme or 'no scheme'!r}; write redis://host:6379/0, rediss://host:6380/0, "
            "unix:///path/to/redis.sock or sentinel://host:26379;sentinel://host2:26379"
        )
    try:
        if scheme == "sentinel":
            parse_sentinel(url)
        else:
            checked_url(url)
    except ValueError as exc:
        return str(exc)
    if scheme == "sentinel" and SentinelOptions.pick(options) is None:
        return (
            f"a sentinel URL needs the name of the master the sentinels monitor: set "
            f'{options_setting} = {{"master_name": "mymaster"}} (the name in sentinel.conf)'
        )
    return None


def parse_sentinel(url: str) -> SentinelUrl:
    """The sentinels of ``sentinel://[:pw@]h1:p1[/db];sentinel://h2:p2;…`` (ValueError if one
    part is not such a URL); the first part's db and credentials are the master's (Celery's
    reading)."""
    chunks = [chunk.strip() for chunk in url.split(";") if chunk.strip()]
    hosts: list[tuple[str, int]] = []
    for chunk in chunks:
        if scheme_of(chunk) != "sentinel":
            raise ValueError(
                "every ;-separated part of a sentinel URL must be sentinel://host:port"
            )
        parts = urlsplit(chunk)
        try:
            port = parts.port or SENTINEL_PORT
        except ValueError:
            raise ValueError("a sentinel URL names a port that is not a number") from None
        if not parts.hostname:
            raise ValueError("a sentinel URL part names no host: write sentinel://host:26379")
        hosts.append((parts.hostname, port))
    if not hosts:
        raise ValueError("a sentinel URL names no sentinel: write sentinel://host:26379")
    first = urlsplit(chunks[0])
    return SentinelUrl(
        sentinels=tuple(hosts),
        db=_db(first.path),
        username=unquote(first.username) if first.username else None,
        password=unquote(first.password) if first.password else None,
    )


def _db(path: str) -> int:
    text = path.strip("/")
    if not text:
        return 0
    if not text.isdigit():
        raise ValueError(f"a Redis database is a number, not {text!r}")
    return int(text)


def checked_url(url: str) -> str:
    """A ``redis://`` / ``rediss://`` / ``unix://`` URL as redis-py reads it: Celery's
    ``ssl_cert_reqs`` spellings translated; ValueError for an unknown value, or TLS options on
    a URL that is not ``rediss://`` (redis-py would fail only at the first connection)."""
    base, mark, text = url.partition("?")
    query = parse_qsl(text, keep_blank_values=True)
    tls = [name for name, _ in query if name in TLS_QUERY]
    if tls and scheme_of(url) != "rediss":
        raise ValueError(f"{', '.join(tls)} need a rediss:// URL (TLS)")
    fixed: list[tuple[str, str]] = []
    for name, value in query:
        fixed.append((name, _cert_reqs(value) if name == "ssl_cert_reqs" else value))
    # Rebuilt by text: urlunsplit would turn unix:///path into unix:/path.
    return f"{base}{mark}{urlencode(fixed)}" if fixed != query else url


def _cert_reqs(value: str) -> str:
    """redis-py's spelling of an ``ssl_cert_reqs`` value; ValueError for one it has no match of."""
    if value.lower() not in CERT_REQS:
        raise ValueError(
            f"ssl_cert_reqs={value!r}: write required, optional or none "
            "(or CERT_REQUIRED, CERT_OPTIONAL, CERT_NONE)"
        )
    return CERT_REQS[value.lower()]


def connect(
    url: str, options: Mapping[str, Any] | None = None, *, timeout: float, **client: Any
) -> Any:
    """A redis-py client of ``url`` whose every attempt at a call fails within about
    ``timeout`` seconds; ``client`` adds connection options (``retry``,
    ``health_check_interval``). Connects on first use. ValueError for a URL ``problem`` rejects.
    """
    found = problem(url, options)
    if found is not None:
        raise ValueError(found)
    if scheme_of(url) == "sentinel":
        return _sentinel_client(url, options, timeout, client)
    import redis

    return redis.Redis.from_url(
        checked_url(url), socket_timeout=timeout, socket_connect_timeout=timeout, **client
    )


def _sentinel_client(
    url: str, options: Mapping[str, Any] | None, timeout: float, client: dict[str, Any]
) -> Any:
    """``master_for`` on the URL's sentinels: half the timeout to ask them all, half for the
    master (module docstring)."""
    from redis import sentinel as redis_sentinel

    sentinel_class: Any = redis_sentinel.Sentinel  # redis-py's Sentinel is untyped
    target = parse_sentinel(url)
    picked = SentinelOptions.pick(options)
    assert picked is not None  # problem() refused it otherwise
    each = max(0.05, timeout / 2 / len(target.sentinels))
    sentinel_kwargs = {"socket_timeout": each, "socket_connect_timeout": each}
    sentinel_kwargs.update(picked.sentinel_kwargs)
    half = max(0.05, timeout / 2)
    sentinel = sentinel_class(
        list(target.sentinels),
        min_other_sentinels=picked.min_other_sentinels,
        sentinel_kwargs=sentinel_kwargs,
        socket_timeout=half,
        socket_connect_timeout=half,
        **client,
    )
    credentials = {"username": target.username, "password": target.password}
    return sentinel.master_for(
        picked.master_name,
        db=target.db,
        **{k: v for k, v in credentials.items() if v is not None},
    )
