"""URLs as they may be shown: in logs, banners, error messages and ``status`` output.

Every URL this package prints passes through ``redact_url``, so a password in
``durable_beat_url``, the lease URL or the broker URL never reaches a log line (SPEC security).

The production forms are covered too (SPEC §7): a Sentinel URL is several URLs joined by ``;``
(each part may carry the password), and a multi-host PostgreSQL URL names its hosts in the query
(``?host=h1:5432&host=h2:5432``) or, as libpq writes it, in a netloc with commas
(``h1:5432,h2:5432``) that ``urlsplit`` cannot give a port of; so the password is found in the
netloc's text, never through the port parser. A password passed as a query parameter
(``?password=…``, libpq's and redis-py's spelling) is hidden as well.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode

UNPARSEABLE = "<unparseable url>"
MASK = "***"


def redact_url(url: str) -> str:
    """The URL with every password replaced by ``***``; an unparseable one is not echoed at all
    (its text may be nothing but a secret)."""
    try:
        if ";" in url and all("://" in part for part in url.split(";") if part.strip()):
            return ";".join(_redact_one(part) for part in url.split(";"))
        return _redact_one(url)
    except ValueError:
        return UNPARSEABLE


def _redact_one(url: str) -> str:
    """One URL redacted by slicing its text, not rebuilt: ``urlunsplit`` would drop the empty
    netloc of ``unix:///path`` or ``sqlite:///file``, and its port parser refuses libpq's
    ``h1:5432,h2:5432``."""
    scheme, sep, rest = url.partition("://")
    if not sep or not scheme or any(c in scheme for c in "/?#@"):
        raise ValueError("no scheme")
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    netloc, tail = rest[:end], rest[end:]
    userinfo, at, hostport = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.split(':', 1)[0]}:{MASK}@{hostport}"
    path, q, query = tail.partition("?")
    if q:
        query, h, fragment = query.partition("#")
        tail = f"{path}?{_redact_query(query)}{h}{fragment}"
    return f"{scheme}://{netloc}{tail}"


def _redact_query(query: str) -> str:
    """The query with the value of any parameter named like a password hidden; untouched (byte
    for byte) when there is none, so a shown URL stays the one configured."""
    pairs = parse_qsl(query, keep_blank_values=True)
    if not any("password" in name.lower() for name, _ in pairs):
        return query
    shown = [(name, MASK if "password" in name.lower() else value) for name, value in pairs]
    return urlencode(shown, safe="*:/,")
