"""Typed settings, read once from ``app.conf`` (SPEC §2).

Read through pydantic so a wrong type fails at start with the setting's name, not later in a
round. ``DURABLE_BEAT_URL`` in the environment wins over ``durable_beat_url``.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from celery_durable_beat.exceptions import ConfigError, SettingProblem
from celery_durable_beat.model import MissedPolicy
from celery_durable_beat.urls import redact_url

DEFAULT_URL = "sqlite:///celerybeat-durable.sqlite3"
URL_ENV = "DURABLE_BEAT_URL"
PREFIX = "durable_beat_"
DEFAULT_REDACT = ("password", "secret", "token", "key")
"""SPEC §2's default for ``durable_beat_redact``, kept so the setting's meaning is fixed now."""


class Settings(BaseModel):
    """Every ``durable_beat_*`` setting with its default.

    ``metrics_port`` turns beat's Prometheus ``/metrics`` on (``wiring.make_observer``; the
    ``metrics`` extra). ``flower_url`` is reserved: accepted and validated now so that a config
    written for a later version does not stop beat at start, but nothing reads it yet (no
    console links). ``redact`` is applied by the read surfaces (``show``,
    ``DurableBeat.get``), not yet to the ``kwargsrepr`` of tick messages.
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
    """Reserved: the Flower base URL for console links (SPEC §9); no console reads it yet."""
    redact: tuple[str, ...] = DEFAULT_REDACT
    """Key substrings (case-insensitive, any depth) whose values read surfaces show as ``***``."""
    quarantine_after: int = Field(5, ge=1)
    dedup_ttl: float = Field(86_400.0, gt=0)
    run_ttl: float = Field(60.0, ge=1)
    queued_ttl: float = Field(3_600.0, gt=0)

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
        try:
            return cls(**values)
        except ValidationError as exc:
            raise ConfigError([_problem(err) for err in exc.errors()]) from None


def _problem(error: Any) -> SettingProblem:
    """One line naming the setting, its value (a URL without its password) and what is wrong."""
    name = str(error["loc"][0]) if error["loc"] else ""
    setting = PREFIX + name if name else "durable_beat settings"
    value = error.get("input")
    shown = redact_url(value) if name.endswith("url") and isinstance(value, str) else repr(value)
    return SettingProblem(
        entry="settings", field=setting, problem=f"{setting} = {shown}: {error['msg']}"
    )
