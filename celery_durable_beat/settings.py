"""Typed settings, read once from ``app.conf`` (SPEC §2).

A wrong value fails at start with the setting's name, not later in a round.
``DURABLE_BEAT_URL`` in the environment wins over ``durable_beat_url``.

Two readers, one meaning. Every value already of its field's plain type and within its bounds
(nearly every config) is taken here as it is; anything else (a string for a number, a value out
of range, an unknown key, a token spec to check) goes through the pydantic model built from
these fields in ``settings_model``, which converts it as pydantic does or refuses it in
pydantic's words. Why: a beat process needs no pydantic, and importing it and building the
model was about 10 MB of beat's RSS and a tenth of its start-up (issue 29). The fields' bounds
and checks are written once, in their metadata, and read by both; a test holds the two readers
equal on every field.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, TypeVar

from celery_durable_beat.exceptions import ConfigError, SettingProblem
from celery_durable_beat.ids import NAMESPACE_PATTERN
from celery_durable_beat.model import MissedPolicy
from celery_durable_beat.redact import DEFAULT_KEYS
from celery_durable_beat.redis_client import SETTING_OPTIONS, SETTING_URL, TRANSPORT_KEYS
from celery_durable_beat.redis_client import problem as lease_problem
from celery_durable_beat.urls import redact_url

DEFAULT_URL = "sqlite:///celerybeat-durable.sqlite3"
URL_ENV = "DURABLE_BEAT_URL"
TOKENS_ENV = "DURABLE_BEAT_API_TOKENS"
PREFIX = "durable_beat_"
DEFAULT_REDACT = DEFAULT_KEYS
"""SPEC §2's default for ``durable_beat_redact`` (defined once, in the pure ``redact`` module)."""
ACTOR_NAME_PATTERN = r"^[^\x00-\x1f\x7f]+$"
"""A token's name: printable, for it is written in the action log (1 to 64 characters)."""


E = TypeVar("E", bound=Enum)


class Role(str, Enum):
    """What an API token may do; each role may do everything the ones before it may (§9)."""

    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return list(Role).index(self)


_URL_FIELDS = ("url", "lease_url")


@dataclass(frozen=True)
class TokenSpec:
    """A token's role and the name its actions are recorded under (SPEC §15):
    ``{"role": "operator", "name": "alice"}``. A bare role string is named
    ``<role>-<first 6 hex of the token's SHA-256>`` instead (``web/auth.py``)."""

    role: Role
    name: str


def positive_seconds(value: Any) -> Any:
    """``redeliver_after``, before its type: a zero, negative or non-numeric delay would
    redeliver at once or never, so it is refused with what to write instead."""
    if value is None:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(
            "must be a number of seconds greater than 0 (e.g. 60); leave it unset to turn "
            "redelivery off"
        )
    return float(value)


def redelivery_count(value: Any) -> Any:
    """``redeliver_max``, before its type."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            "must be a whole number of redeliveries, 0 or more (default 3; 0 never sends a "
            "tick again)"
        )
    return value


def namespace_name(value: Any) -> Any:
    """``namespace``, before its type: it becomes part of task ids, Redis keys and store rows,
    so it is refused unless it is 1 to 40 of ``[a-z0-9_-]`` (SPEC §2)."""
    if value is None:
        return value
    if not isinstance(value, str) or re.fullmatch(NAMESPACE_PATTERN, value) is None:
        raise ValueError(
            "must be 1 to 40 characters of a-z, 0-9, _ and - (e.g. 'billing'); leave it unset "
            "for the default namespace"
        )
    return value


def known_transport_keys(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """``lease_transport_options``, after its type: a misspelt key would leave a sentinel lease
    without its master name or password and fail later, far from the cause: refused here,
    naming the keys read."""
    unknown = sorted(set(value or {}) - set(TRANSPORT_KEYS))
    if unknown:
        raise ValueError(f"unknown keys {unknown}; the lease reads {', '.join(TRANSPORT_KEYS)}")
    return value


def _meta(
    *,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
    before: Callable[[Any], Any] | None = None,
    after: Callable[[Any], Any] | None = None,
) -> dict[str, Any]:
    """A field's bounds (pydantic's ``Field`` keywords) and its checks before / after its type."""
    bounds = {k: v for k, v in (("gt", gt), ("ge", ge), ("le", le)) if v is not None}
    checks = {k: v for k, v in (("before", before), ("after", after)) if v is not None}
    return {"bounds": bounds, **checks}


@dataclass(frozen=True)
class Settings:
    """Every ``durable_beat_*`` setting with its default.

    ``metrics_port`` turns beat's Prometheus ``/metrics`` on (``wiring.make_observer``; the
    ``metrics`` extra). ``flower_url`` gives the console's task links; ``api_tokens`` the roles of
    ``serve``. ``redact`` is applied by the read surfaces (``show``, ``DurableBeat.get``, the API
    and the console) and to the ``argsrepr`` / ``kwargsrepr`` of every tick message (scheduled,
    catch-up and manual), so Flower, task events and worker logs do not show those values
    either; the message body keeps the real ones for the task.

    Built with keywords (``Settings(run_ttl=3)``) or ``from_conf``; either way every value is
    checked and converted (``ConfigError`` naming the setting), as the module docstring says.
    """

    url: str = DEFAULT_URL
    lease_url: str | None = None
    """``redis://``, ``rediss://`` (TLS), ``unix://`` or ``sentinel://…;sentinel://…``, as
    Celery's Redis settings take them (``redis_client``); unset: the lease row in the store."""
    lease_transport_options: dict[str, Any] | None = field(
        default=None, repr=False, metadata=_meta(after=known_transport_keys)
    )
    """For a sentinel lease URL: ``master_name`` (required), ``sentinel_kwargs`` (the sentinels'
    own connection options, e.g. their password), ``min_other_sentinels`` — Celery's
    ``broker_transport_options`` keys of the same meaning."""
    lease_ttl: float = field(default=30.0, metadata=_meta(gt=0))
    poll_interval: float = field(default=1.0, metadata=_meta(gt=0))
    batch_size: int = field(default=500, metadata=_meta(ge=1, le=100_000))
    default_missed: MissedPolicy = MissedPolicy.SKIP
    history_keep: int = field(default=100, metadata=_meta(ge=1))
    sync_config: bool = True
    metrics_port: int | None = field(default=None, metadata=_meta(ge=0, le=65535))
    """Beat serves Prometheus ``/metrics`` here (every interface), leader and standbys alike
    (SPEC §10); unset: no metrics and prometheus-client is never imported. Needs the ``metrics``
    extra: with the port set and the client missing, beat refuses to start."""
    flower_url: str | None = None
    """Flower's base URL: the console links each task id to ``{flower_url}/task/{id}``."""
    api_tokens: dict[str, Role | TokenSpec] | None = field(default=None, repr=False)
    """Token → role, or → ``{"role", "name"}``, for ``serve`` (SPEC §9, §15: the name is the
    actor its actions are recorded under); ``DURABLE_BEAT_API_TOKENS`` (``role:token,…``)
    overrides. Never shown: not in repr, and a bad value is reported without it."""
    redact: tuple[str, ...] = DEFAULT_REDACT
    """Key substrings (case-insensitive, any depth) whose values read surfaces and the tick
    messages' ``argsrepr`` / ``kwargsrepr`` show as ``***``."""
    quarantine_after: int = field(default=5, metadata=_meta(ge=1))
    dedup_ttl: float = field(default=86_400.0, metadata=_meta(gt=0))
    run_ttl: float = field(default=60.0, metadata=_meta(ge=1))
    queued_ttl: float = field(default=3_600.0, metadata=_meta(gt=0))
    worker_ttl: float = field(default=60.0, metadata=_meta(gt=0))
    """Seconds after which a worker with ``install(app)`` that has not announced itself counts
    as gone (``require_worker``, ``status``); workers announce every third of it."""
    redeliver_after: float | None = field(default=None, metadata=_meta(before=positive_seconds))
    """Seconds an ``enqueued`` tick may stay unclaimed before the leader looks for evidence that
    the broker lost it and, if so, publishes it again with its task id (SPEC §6,
    ``redelivery.py``); unset: off. Needs ``install(app)`` on the workers (the guard makes a
    second copy harmless)."""
    redeliver_max: int = field(default=3, metadata=_meta(before=redelivery_count))
    """Most redeliveries of one tick after its first publish."""
    namespace: str | None = field(default=None, metadata=_meta(before=namespace_name))
    """The namespace this app's schedules, history, actions, lease, claims and Redis keys live
    in (SPEC §16), so several apps share one store and one Redis; unset: the default namespace,
    whose ids, keys and rows are exactly those of releases before namespaces."""

    def __post_init__(self) -> None:
        given = {name: getattr(self, name) for name in SETTING_NAMES}
        taken = _take_plain(given)
        if taken is None:  # not plain as given: pydantic converts it or words the refusal
            from celery_durable_beat.settings_model import validated

            taken = validated(given)
        for name, value in taken.items():
            if value is not given[name]:
                object.__setattr__(self, name, value)
        self._check_redelivery()

    def _check_redelivery(self) -> None:
        """A tick is watched for redelivery at most ``dedup_ttl`` after its first publish (the
        guard forgets a claim then): a delay as long would never redeliver anything."""
        after = self.redeliver_after
        if after is None or after < self.dedup_ttl:
            return
        name = f"{PREFIX}redeliver_after"
        problem = (
            f"{name} = {after:g} must be shorter than {PREFIX}dedup_ttl ({self.dedup_ttl:g} s): "
            "ticks are watched for redelivery only while the workers' guard remembers their "
            "claims; lower it (minutes are usual) or raise durable_beat_dedup_ttl"
        )
        raise ConfigError([SettingProblem(entry="settings", field=name, problem=problem)])

    def __repr__(self) -> str:
        """The URLs with their passwords hidden: a Settings printed in a log, a traceback or a
        debugger must not carry the store's or the lease's credentials (nor the tokens, the
        transport options: left out)."""
        shown = []
        for spec in fields(self):
            if spec.repr:
                value = getattr(self, spec.name)
                hide = spec.name in _URL_FIELDS and isinstance(value, str)
                shown.append(f"{spec.name}={redact_url(value) if hide else value!r}")
        return f"Settings({', '.join(shown)})"

    @classmethod
    def from_conf(cls, conf: Any, environ: Mapping[str, str] | None = None) -> Settings:
        """Read from a Celery ``app.conf`` (or any mapping with ``get``)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name in SETTING_NAMES:
            value = conf.get(PREFIX + name)
            if value is not None:
                values[name] = value
        if env.get(URL_ENV):
            values["url"] = env[URL_ENV]
        if env.get(TOKENS_ENV):
            values["api_tokens"] = _tokens_from_env(env[TOKENS_ENV])
        settings = cls(**values)
        settings.check_lease()
        return settings

    def check_lease(self) -> None:
        """Refuse (``ConfigError``) a lease URL no Redis client can be built from, or a sentinel
        URL without its master's name: a process must not start and fail in every round."""
        if not self.lease_url:
            return
        found = lease_problem(self.lease_url, self.lease_transport_options)
        if found is None:
            return
        field_name = SETTING_OPTIONS if "master_name" in found else SETTING_URL
        shown = redact_url(self.lease_url)
        raise ConfigError(
            [
                SettingProblem(
                    entry="settings",
                    field=field_name,
                    problem=f"{SETTING_URL} = {shown}: {found}",
                )
            ]
        )


SETTING_NAMES: tuple[str, ...] = tuple(spec.name for spec in fields(Settings))
"""Every setting's name without its ``durable_beat_`` prefix, in declaration order."""


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


# --- the plain reading: values already of their type, as pydantic would return them -----------


class _NotPlain(Exception):
    """A value the plain reading does not take as it is: the pydantic model decides."""


def _text(value: Any) -> str:
    if type(value) is str:
        return value
    raise _NotPlain


def _number(value: Any) -> float:
    if type(value) is float or type(value) is int:
        return float(value)
    raise _NotPlain


def _whole(value: Any) -> int:
    if type(value) is int:
        return value
    raise _NotPlain


def _flag(value: Any) -> bool:
    if type(value) is bool:
        return value
    raise _NotPlain


def _member(kind: type[E]) -> Callable[[Any], E]:
    """The reader of a string enum's fields: a member, or one of its values."""

    def read(value: Any) -> E:
        if type(value) is kind:
            return value
        if type(value) is str and value in kind._value2member_map_:
            return kind(value)
        raise _NotPlain

    return read


_missed = _member(MissedPolicy)
_role = _member(Role)


def _texts(value: Any) -> tuple[str, ...]:
    if (type(value) is tuple or type(value) is list) and all(type(v) is str for v in value):
        return tuple(value)
    raise _NotPlain


def _options(value: Any) -> dict[str, Any]:
    if type(value) is dict and all(type(k) is str for k in value):
        return dict(value)
    raise _NotPlain


def _token(value: Any) -> Role | TokenSpec:
    if type(value) is TokenSpec:
        return value
    if type(value) is dict and set(value) == {"role", "name"}:
        name = _text(value["name"])
        if len(name) > 64 or not re.fullmatch(ACTOR_NAME_PATTERN[1:-1], name):
            raise _NotPlain
        return TokenSpec(role=_role(value["role"]), name=name)
    return _role(value)


def _tokens(value: Any) -> dict[str, Role | TokenSpec]:
    if type(value) is dict and all(type(k) is str for k in value):
        return {token: _token(spec) for token, spec in value.items()}
    raise _NotPlain


def _optional(read: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else read(value)


_READERS: dict[str, Callable[[Any], Any]] = {
    "str": _text,
    "str | None": _optional(_text),
    "float": _number,
    "float | None": _optional(_number),
    "int": _whole,
    "int | None": _optional(_whole),
    "bool": _flag,
    "MissedPolicy": _missed,
    "tuple[str, ...]": _texts,
    "dict[str, Any] | None": _optional(_options),
    "dict[str, Role | TokenSpec] | None": _optional(_tokens),
}
"""Each field's annotation → what takes a value of exactly that type (``_NotPlain`` else)."""
_FIELDS = tuple(
    (spec.name, _READERS[str(spec.type)], spec.metadata.get("bounds", {}), spec.metadata)
    for spec in fields(Settings)
)


def _within(value: Any, bounds: Mapping[str, float]) -> bool:
    if value is None:
        return True
    return (
        ("gt" not in bounds or value > bounds["gt"])
        and ("ge" not in bounds or value >= bounds["ge"])
        and ("le" not in bounds or value <= bounds["le"])
    )


def _take_plain(given: Mapping[str, Any]) -> dict[str, Any] | None:
    """Every value as pydantic would return it, or None when one is not plain (any doubt: a
    conversion, a bound crossed, a check refusing)."""
    taken: dict[str, Any] = {}
    try:
        for name, read, bounds, meta in _FIELDS:
            value = given[name]
            if "before" in meta:
                value = meta["before"](value)
            value = read(value)
            if "after" in meta:
                value = meta["after"](value)
            if not _within(value, bounds):
                return None
            taken[name] = value
    except (_NotPlain, ValueError, TypeError, OverflowError):
        return None
    return taken
