"""URLs as they may be shown: in logs, banners, error messages and ``status`` output.

Every URL this package prints passes through ``redact_url``, so a password in
``durable_beat_url``, the lease URL or the broker URL never reaches a log line (SPEC security).
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

UNPARSEABLE = "<unparseable url>"


def redact_url(url: str) -> str:
    """The URL with its password replaced by ``***``; an unparseable one is not echoed at all
    (its text may be nothing but a secret)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.hostname or ""
        if ":" in host:  # an IPv6 literal keeps its brackets
            host = f"[{host}]"
        port = f":{parts.port}" if parts.port else ""
        return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))
    except ValueError:
        return UNPARSEABLE
