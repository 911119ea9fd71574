"""Bearer tokens and cumulative roles (SPEC §9).

Tokens are compared in constant time against every configured token (``hmac.compare_digest``),
so how long a refusal takes says nothing about how close a guess was. A token is read from the
``Authorization`` header (the API) or the console's sign-in form, never from a query string:
URLs end up in access logs, browser history and referrers. The console's cookie holds a session
id, not the token (``web/session.py``).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from celery_durable_beat.settings import TOKENS_ENV, Role, TokenSpec
from celery_durable_beat.settings_model import token_spec

COOKIE = "durable_beat_session"
"""The console's cookie: an opaque, signed session id (``web/session.py``), never a token;
HttpOnly and SameSite=Strict."""
MIN_TOKEN = 16
"""Shortest API token accepted: 16 characters of a random token are beyond guessing."""


class BadTokens(ValueError):
    """The configured tokens would leave ``serve`` open or guessable: it refuses to start."""


SETTING = "durable_beat_api_tokens"
"""The tokens' setting in the docs' spelling; messages name it as the user wrote it."""


class NoTokens(BadTokens):
    """``serve`` was asked to start with no token: it would be an open door."""

    def __init__(self, setting: str = SETTING) -> None:
        setting = SETTING if setting == TOKENS_ENV else setting  # the config's name, below
        super().__init__(
            f"serve needs at least one API token: set {setting} = "
            '{"<token>": "viewer|operator|admin"} in the Celery config, or '
            f"{TOKENS_ENV}=admin:<token>,viewer:<token> in the environment"
        )


class ShortToken(BadTokens):
    """A configured token is short enough to guess; the message names its role, not it."""

    def __init__(self, role: Role, length: int, setting: str = SETTING) -> None:
        where = setting if setting == TOKENS_ENV else f"{setting} (or {TOKENS_ENV})"
        super().__init__(
            f"{where}: a {role.value} token has {length} "
            f"characters; each token needs at least {MIN_TOKEN}, e.g. from "
            "python -c 'import secrets; print(secrets.token_urlsafe(24))'"
        )


@dataclass(frozen=True)
class Caller:
    """Who presented a known token: its role, and the name actions are recorded under."""

    role: Role
    name: str


def token_name(token: str, role: Role) -> str:
    """The name of a token configured with a bare role: ``<role>-<first 6 hex of its
    SHA-256>``, which tells tokens apart in the action log without revealing them."""
    digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{role.value}-{digest[:6]}"


def _caller(token: str, value: Role | TokenSpec | str | Mapping[str, str]) -> Caller:
    if isinstance(value, TokenSpec):
        return Caller(value.role, value.name)
    if isinstance(value, Mapping):
        spec = token_spec(value)
        return Caller(spec.role, spec.name)
    role = Role(value)
    return Caller(role, token_name(token, role))


class Tokens:
    """The configured tokens; ``identify`` answers who a presented token is (role and name)."""

    def __init__(
        self, tokens: Mapping[str, Role | TokenSpec] | None, setting: str = SETTING
    ) -> None:
        """``setting``: the tokens' setting as the user wrote it, for the refusals."""
        if not tokens:
            raise NoTokens(setting)
        callers = {token: _caller(token, value) for token, value in tokens.items()}
        for token, caller in callers.items():
            if len(token) < MIN_TOKEN:
                raise ShortToken(caller.role, len(token), setting)
        self._tokens = tuple((token.encode(), caller) for token, caller in callers.items())

    def identify(self, presented: str | None) -> Caller | None:
        """Who ``presented`` is, or None; every token is compared, each in constant time."""
        if not presented:
            return None
        candidate = presented.encode("utf-8", "surrogatepass")  # any text, never a 500
        found: Caller | None = None
        for token, caller in self._tokens:
            if hmac.compare_digest(token, candidate):
                found = caller
        return found

    def role_of(self, presented: str | None) -> Role | None:
        """The role of ``presented``, or None (``identify``'s role)."""
        found = self.identify(presented)
        return None if found is None else found.role


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def allows(role: Role | None, needed: Role) -> bool:
    """Roles are cumulative: admin ⊃ operator ⊃ viewer."""
    return role is not None and role.rank >= needed.rank
