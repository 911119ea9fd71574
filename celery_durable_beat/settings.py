"""Typed settings, read once from ``app.conf`` (SPEC §2).

Read through pydantic so a wrong type fails at start with the setting's name, not later in a
round. ``DURABLE_BEAT_URL`` in the environment wins over ``durable_beat_url``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from celery_durable_beat.exceptions import ConfigError, SettingProblem
from celery_durable_beat.model import MissedPolicy
from celery_durable_beat.redact import DEFAULT_KEYS, redact
from celery_durable_beat.redis_client import SETTING_OPTIONS, SETTING_URL, TRANSPORT_KEYS
from celery_durable_beat.redis_client import problem as lease_problem
from celery_durable_beat.urls import redact_url

DEFAULT_URL = "sqlite:///celerybeat-durable.sqlite3"
URL_ENV = "DURABLE_BEAT_URL"
TOKENS_ENV = "DURABLE_BEAT_API_TOKENS"
PREFIX = "durable_beat_"
DEFAULT_REDACT = DEFAULT_KEYS
"""SPEC §2's default for ``durable_beat_redact`` (defined once, in the pure ``redact`` module)."""


class Role(str, Enum):
    """What an API token may do; each role may do everything the ones before it may (§9)."""

    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return list(Role).index(self)


_URL_FIELDS = ("url", "lease_url")


class TokenSpec(BaseModel):
    """A token's role and the name its actions are recorded under (SPEC §15):
    ``{"role": "operator", "name": "alice"}``. A bare role string is named
    ``<role>-<first 6 hex of the token's SHA-256>`` instead (``web/auth.py``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Role
    name: str = Field(min_length=1, max_length=64, pattern=r"^[^\x00-\x1f\x7f]+$")


class Settings(BaseModel):
    """Every ``durable_beat_*`` setting with its default.

    ``metrics_port`` turns beat's Prometheus ``/metrics`` on (``wiring.make_observer``; the
    ``metrics`` extra). ``flower_url`` gives the console's task links; ``api_tokens`` the roles of
    ``serve``. ``redact`` is applied by the read surfaces (``show``, ``DurableBeat.get``, the API
    and the console) and to the ``argsrepr`` / ``kwargsrepr`` of every tick message (scheduled,
    catch-up and manual), so Flower, task events and worker logs do not show those values
    either; the message body keeps the real ones for the task.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        """``repr`` shows the URLs with their passwords hidden: a Settings printed in a log, a
        traceback or a debugger must not carry the store's or the lease's credentials."""
        for name, value in super().__repr_args__():
            hide = name in _URL_FIELDS and isinstance(value, str)
            yield name, redact_url(value) if hide else value

    url: str = DEFAULT_URL
    lease_url: str | None = None
    """``redis://``, ``rediss://`` (TLS), ``unix://`` or ``sentinel://…;sentinel://…``, as
    Celery's Redis settings take them (``redis_client``); unset: the lease row in the store."""
    lease_transport_options: dict[str, Any] | None = Field(None, repr=False)
    """For a sentinel lease URL: ``master_name`` (required), ``sentinel_kwargs`` (the sentinels'
    own connection options, e.g. their password), ``min_other_sentinels`` — Celery's
    ``broker_transport_options`` keys of the same meaning."""
    lease_ttl: float = Field(30.0, gt=0)
    poll_interval: float = Field(1.0, gt=0)
    batch_size: int = Field(500, ge=1, le=100_000)
    default_missed: MissedPolicy = MissedPolicy.SKIP
    history_keep: int = Field(100, ge=1)
    sync_config: bool = True
    metrics_port: int | None = Field(None, ge=0, le=65535)
    """Beat serves Prometheus ``/metrics`` here (every interface), leader and standbys alike
    (SPEC §10); unset: no metrics and prometheus-client is never imported. Needs the ``metrics``
    extra: with the port set and the client missing, beat refuses to start."""
    flower_url: str | None = None
    """Flower's base URL: the console links each task id to ``{flower_url}/task/{id}``."""
    api_tokens: dict[str, Role | TokenSpec] | None = Field(None, repr=False)
    """Token → role, or → ``{"role", "name"}``, for ``serve`` (SPEC §9, §15: the name is the
    actor its actions are recorded under); ``DURABLE_BEAT_API_TOKENS`` (``role:token,…``)
    overrides. Never shown: not in repr, and a bad value is reported without it."""
    redact: tuple[str, ...] = DEFAULT_REDACT
    """Key substrings (case-insensitive, any depth) whose values read surfaces and the tick
    messages' ``argsrepr`` / ``kwargsrepr`` show as ``***``."""
    quarantine_after: int = Field(5, ge=1)
    dedup_ttl: float = Field(86_400.0, gt=0)
    run_ttl: float = Field(60.0, ge=1)
    queued_ttl: float = Field(3_600.0, gt=0)
    worker_ttl: float = Field(60.0, gt=0)
    """Seconds after which a worker with ``install(app)`` that has not announced itself counts
    as gone (``require_worker``, ``status``); workers announce every third of it."""
    redeliver_after: float | None = None
    """Seconds an ``enqueued`` tick may stay unclaimed before the leader looks for evidence that
    the broker lost it and, if so, publishes it again with its task id (SPEC §6,
    ``redelivery.py``); unset: off. Needs ``install(app)`` on the workers (the guard makes a
    second copy harmless)."""
    redeliver_max: int = 3
    """Most redeliveries of one tick after its first publish."""

    @field_validator("redeliver_after", mode="before")
    @classmethod
    def _positive_seconds(cls, value: Any) -> Any:
        """A zero, negative or non-numeric delay would redeliver at once or never: refused with
        what to write instead."""
        if value is None:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(
                "must be a number of seconds greater than 0 (e.g. 60); leave it unset to turn "
                "redelivery off"
            )
        return float(value)

    @field_validator("redeliver_max", mode="before")
    @classmethod
    def _count(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(
                "must be a whole number of redeliveries, 0 or more (default 3; 0 never sends a "
                "tick again)"
            )
        return value

    @classmethod
    def from_conf(cls, conf: Any, environ: dict[str, str] | None = None) -> Settings:
        """Read from a Celery ``app.conf`` (or any mapping with ``get``)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            value = conf.get(PREFIX + name)
            if value is not None:
                values[name] = value
        if env.get(URL_ENV):
            values["url"] = env[URL_ENV]
        if env.get(TOKENS_ENV):
            values["api_tokens"] = _tokens_from_env(env[TOKENS_ENV])
        try:
            settings = cls(**values)
        except ValidationError as exc:
            raise ConfigError([_problem(err) for err in exc.errors()]) from None
        settings.check_lease()
        return settings

    @field_validator("lease_transport_options")
    @classmethod
    def _known_transport_keys(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """A misspelt key would leave a sentinel lease without its master name or password
        and fail later, far from the cause: refused here, naming the keys read."""
        unknown = sorted(set(value or {}) - set(TRANSPORT_KEYS))
        if unknown:
            raise ValueError(f"unknown keys {unknown}; the lease reads {', '.join(TRANSPORT_KEYS)}")
        return value

    def check_lease(self) -> None:
        """Refuse (``ConfigError``) a lease URL no Redis client can be built from, or a sentinel
        URL without its master's name: a process must not start and fail in every round."""
        if not self.lease_url:
            return
        found = lease_problem(self.lease_url, self.lease_transport_options)
        if found is None:
            return
        field = SETTING_OPTIONS if "master_name" in found else SETTING_URL
        shown = redact_url(self.lease_url)
        raise ConfigError(
            [
                SettingProblem(
                    entry="settings",
                    field=field,
                    problem=f"{SETTING_URL} = {shown}: {found}",
                )
            ]
        )


def _tokens_from_env(text: str) -> dict[str, str] | str:
    """``role:token,role:token`` as the setting's mapping; unreadable text is passed on whole,
    so validation reports it (without the tokens) under the setting's name."""
    tokens: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        role, sep, token = item.partition(":")
        if not sep or not token.strip():
            return text
        tokens[token.strip()] = role.strip()
    return tokens


def _problem(error: Any) -> SettingProblem:
    """One line naming the setting, its value (a URL without its password) and what is wrong."""
    name = str(error["loc"][0]) if error["loc"] else ""
    setting = PREFIX + name if name else "durable_beat settings"
    value = error.get("input")
    if name == "api_tokens":
        message = (
            "must map each token to viewer, operator or admin, or to "
            '{"role": "operator", "name": "alice"} (a name of 1 to 64 printable characters) '
            f"({TOKENS_ENV} reads role:token,role:token)"
        )
        return SettingProblem(
            entry="settings",
            field=setting,
            problem=f"{setting} (tokens not shown): {message}",  # a token never reaches a log
        )
    if name.endswith("url") and isinstance(value, str):
        shown = redact_url(value)
    else:  # transport options may hold a sentinel password
        shown = repr(redact(value, DEFAULT_KEYS))
    return SettingProblem(
        entry="settings", field=setting, problem=f"{setting} = {shown}: {error['msg']}"
    )
