"""Bearer tokens and cumulative roles (SPEC §9).

Tokens are compared in constant time against every configured token (``hmac.compare_digest``),
so how long a refusal takes says nothing about how close a guess was. A token is read from the
``Authorization`` header (the API) or the console's HttpOnly cookie, never from a query string:
URLs end up in access logs, browser history and referrers.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from celery_durable_beat.settings import TOKENS_ENV, Role

COOKIE = "durable_beat_session"
"""The console's cookie: the signed-in token, HttpOnly and SameSite=Strict."""


class NoTokens(ValueError):
    """``serve`` was asked to start with no token: it would be an open door."""

    def __init__(self) -> None:
        super().__init__(
            "serve needs at least one API token: set durable_beat_api_tokens = "
            '{"<token>": "viewer|operator|admin"} in the Celery config, or '
            f"{TOKENS_ENV}=admin:<token>,viewer:<token> in the environment"
        )


class Tokens:
    """The configured tokens; ``role_of`` answers which role a presented token has."""

    def __init__(self, tokens: Mapping[str, Role] | None) -> None:
        if not tokens:
            raise NoTokens()
        self._tokens = tuple((token.encode(), Role(role)) for token, role in tokens.items())

    def role_of(self, presented: str | None) -> Role | None:
        """The role of ``presented``, or None; every token is compared, each in constant time."""
        if not presented:
            return None
        candidate = presented.encode()
        found: Role | None = None
        for token, role in self._tokens:
            if hmac.compare_digest(token, candidate):
                found = role
        return found


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def allows(role: Role | None, needed: Role) -> bool:
    """Roles are cumulative: admin ⊃ operator ⊃ viewer."""
    return role is not None and role.rank >= needed.rank


def csrf_token(session_token: str) -> str:
    """The console forms' CSRF token, bound to the signed-in token (HMAC with it as the key).

    A page on another site can make a browser send the cookie but cannot read it, so it cannot
    compute this value; nothing is kept on the server, so several ``serve`` processes agree.
    """
    return hmac.new(session_token.encode(), b"durable-beat csrf v1", hashlib.sha256).hexdigest()


def csrf_ok(session_token: str, presented: str | None) -> bool:
    return presented is not None and hmac.compare_digest(csrf_token(session_token), presented)
