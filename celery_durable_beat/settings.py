"""Typed settings, read once from ``app.conf`` (SPEC §2).

A wrong value fails at start with the setting's name, not later in a round.
``DURABLE_BEAT_URL`` in the environment wins over ``durable_beat_url``.

Read through Celery's own lookup (``conf.get``), so under the app's namespace a setting is
written ``CELERY_DURABLE_BEAT_URL`` (a Django project), and named as the user wrote it in every
message (SPEC §16): ``read_conf`` returns the values with their ``SettingNames``
(``setting_names``), which ``Settings.named`` checks them under and keeps as ``names``.

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
from typing import Any, ClassVar, TypeVar

from celery_durable_beat.exceptions import ConfigError, SettingProblem
from celery_durable_beat.model import MissedPolicy
from celery_durable_beat.redact import DEFAULT_KEYS
from celery_durable_beat.redis_client import problem as lease_problem
from celery_durable_beat.setting_names import PLAIN, SettingNames
from celery_durable_beat.setting_values import (
    ACTOR_NAME_PATTERN,
    Role,
    TokenSpec,
    known_transport_keys,
    namespace_name,
    positive_seconds,
    redelivery_count,
)
from celery_durable_beat.urls import redact_url

__all__ = [  # the settings' values (setting_values) are re-exported: importable from here
    "ACTOR_NAME_PATTERN",
    "DEFAULTS",
    "DEFAULT_REDACT",
    "DEFAULT_URL",
    "LIVENESS_FLOOR_S",
    "LIVENESS_TURNS",
    "PREFIX",
    "SETTING_NAMES",
    "TOKENS_ENV",
    "URL_ENV",
    "Role",
    "SettingNames",
    "Settings",
    "TokenSpec",
    "read_conf",
]

DEFAULT_URL = "sqlite:///celerybeat-durable.sqlite3"
URL_ENV = "DURABLE_BEAT_URL"
TOKENS_ENV = "DURABLE_BEAT_API_TOKENS"
PREFIX = "durable_beat_"
DEFAULT_REDACT = DEFAULT_KEYS
"""SPEC §2's default for ``durable_beat_redact`` (defined once, in the pure ``redact`` module)."""
LIVENESS_TURNS = 3
"""``durable_beat_liveness_s``'s default, in the loop's longest waits (SPEC §2)."""
LIVENESS_FLOOR_S = 30.0
"""The least default ``durable_beat_liveness_s`` (SPEC §2); a value set is taken as it is."""
E = TypeVar("E", bound=Enum)
_URL_FIELDS = ("url", "lease_url")


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
    liveness_s: float | None = field(default=None, metadata=_meta(gt=0))
    """Seconds without a turn of beat's loop after which ``/healthz`` on the metrics port answers
    503 (SPEC §17, ``liveness.py``); unset: SPEC §2's default (``liveness_seconds``)."""
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

    _names: ClassVar[SettingNames] = PLAIN
    """How messages name each setting; ``named`` sets it per instance (not a field: never
    compared, never shown)."""

    def __post_init__(self) -> None:
        given = {name: getattr(self, name) for name in SETTING_NAMES}
        for name, value in _checked(given, self._names).items():
            if value is not given[name]:
                object.__setattr__(self, name, value)

    def liveness_seconds(self, renew_every: float) -> float:
        """``liveness_s`` as set, else SPEC §2's default: ``LIVENESS_TURNS`` times the larger of
        the poll interval and ``renew_every`` (the lease's renewal interval,
        ``leadership.RENEW_AFTER`` of the TTL), at least ``LIVENESS_FLOOR_S``.

        Three of the loop's longest waits: a healthy loop turns at least every poll interval,
        so only a loop that missed about three turns in a row is restarted; the floor keeps a
        store or lease call that is slow but bounded from restarting a beat that would recover.
        ``renew_every`` is given, not computed here: it is leadership's rule, and settings never
        import the round (the control API reads them).
        """
        if self.liveness_s is not None:
            return self.liveness_s
        return max(LIVENESS_FLOOR_S, LIVENESS_TURNS * max(self.poll_interval, renew_every))

    @property
    def names(self) -> SettingNames:
        """Each setting's name as the user wrote it (``CELERY_DURABLE_BEAT_LEASE_TTL`` in Django
        settings), for every message that names one; ``durable_beat_<field>`` when built with
        keywords."""
        return self._names

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
        """Read from a Celery ``app.conf`` (or any mapping with ``get``), each setting through
        Celery's own lookup, so ``CELERY_DURABLE_BEAT_URL`` counts under the ``CELERY``
        namespace; a bad value is reported under the name it was written as."""
        values, names = read_conf(conf, environ)
        return cls.named(values, names)

    @classmethod
    def named(cls, values: Mapping[str, Any], names: SettingNames) -> Settings:
        """Settings of ``values`` (field → value, the rest at their defaults) whose messages
        name each setting as ``names`` says; ``ConfigError`` in those names.

        Checked under those names before it is built: ``__post_init__`` then takes every value
        as it is (plain, within bounds) and has nothing left to refuse in the docs' spelling.
        """
        settings = cls(**_checked({**DEFAULTS, **values}, names))
        object.__setattr__(settings, "_names", names)
        settings.check_lease()
        return settings

    def check_lease(self) -> None:
        """Refuse (``ConfigError``) a lease URL no Redis client can be built from, or a sentinel
        URL without its master's name: a process must not start and fail in every round."""
        if not self.lease_url:
            return
        url_name = self.names.of("lease_url")
        options_name = self.names.of("lease_transport_options")
        found = lease_problem(self.lease_url, self.lease_transport_options, options_name)
        if found is None:
            return
        field_name = options_name if "master_name" in found else url_name
        shown = redact_url(self.lease_url)
        raise ConfigError(
            [
                SettingProblem(
                    entry="settings",
                    field=field_name,
                    problem=f"{url_name} = {shown}: {found}",
                )
            ]
        )


SETTING_NAMES: tuple[str, ...] = tuple(spec.name for spec in fields(Settings))
"""Every setting's name without its ``durable_beat_`` prefix, in declaration order."""
DEFAULTS: dict[str, Any] = {spec.name: spec.default for spec in fields(Settings)}


def read_conf(
    conf: Any, environ: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], SettingNames]:
    """Every setting ``conf`` holds (field → value; unset ones left out) with the environment's
    overrides (``DURABLE_BEAT_URL``, ``DURABLE_BEAT_API_TOKENS``), and how each is named.

    Each value is read with ``conf.get``, Celery's own lookup (the namespaced key first), and
    named after the key that lookup matched (``setting_names``).
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name in SETTING_NAMES:
        value = conf.get(PREFIX + name)
        if value is not None:
            values[name] = value
    overrides: dict[str, str] = {}
    if env.get(URL_ENV):
        values["url"], overrides["url"] = env[URL_ENV], URL_ENV
    if env.get(TOKENS_ENV):
        values["api_tokens"] = _tokens_from_env(env[TOKENS_ENV])
        overrides["api_tokens"] = TOKENS_ENV
    return values, SettingNames.of_conf(conf, SETTING_NAMES, PREFIX, overrides)


def _checked(given: Mapping[str, Any], names: SettingNames) -> dict[str, Any]:
    """Every value converted (plain, else by the pydantic model) and checked together, or
    ``ConfigError`` naming each bad setting as ``names`` says."""
    taken = _take_plain(given)
    if taken is None:  # not plain as given: pydantic converts it or words the refusal
        from celery_durable_beat.settings_model import validated

        taken = validated(given, names)
    _check_redelivery(taken["redeliver_after"], taken["dedup_ttl"], names)
    return taken


def _check_redelivery(after: float | None, dedup_ttl: float, names: SettingNames) -> None:
    """A tick is watched for redelivery at most ``dedup_ttl`` after its first publish (the
    guard forgets a claim then): a delay as long would never redeliver anything."""
    if after is None or after < dedup_ttl:
        return
    name, ttl_name = names.of("redeliver_after"), names.of("dedup_ttl")
    problem = (
        f"{name} = {after:g} must be shorter than {ttl_name} ({dedup_ttl:g} s): ticks are "
        "watched for redelivery only while the workers' guard remembers their claims; lower "
        f"it (minutes are usual) or raise {ttl_name}"
    )
    raise ConfigError([SettingProblem(entry="settings", field=name, problem=problem)])


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
