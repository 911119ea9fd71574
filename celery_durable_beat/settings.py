"""Typed settings, read once from ``app.conf`` (SPEC §2).

Read through pydantic so a wrong type fails at start with the setting's name, not later in a
round. ``DURABLE_BEAT_URL`` in the environment wins over ``durable_beat_url``.
"""

from __future__ import annotations

import os
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from celery_durable_beat.exceptions import ConfigError, SettingProblem
from celery_durable_beat.model import MissedPolicy
from celery_durable_beat.redact import DEFAULT_KEYS
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

    url: str = DEFAULT_URL
    lease_url: str | None = None
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
    api_tokens: dict[str, Role] | None = Field(None, repr=False)
    """Token → role for ``serve`` (SPEC §9); ``DURABLE_BEAT_API_TOKENS`` (``role:token,…``)
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
            return cls(**values)
        except ValidationError as exc:
            raise ConfigError([_problem(err) for err in exc.errors()]) from None


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
            "must map each token to viewer, operator or admin "
            f"({TOKENS_ENV} reads role:token,role:token)"
        )
        return SettingProblem(
            entry="settings",
            field=setting,
            problem=f"{setting} (tokens not shown): {message}",  # a token never reaches a log
        )
    shown = redact_url(value) if name.endswith("url") and isinstance(value, str) else repr(value)
    return SettingProblem(
        entry="settings", field=setting, problem=f"{setting} = {shown}: {error['msg']}"
    )
