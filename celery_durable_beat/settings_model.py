"""The settings as a pydantic model: what converts, or refuses in pydantic's words, a value the
plain reading in ``settings`` does not take as it is (SPEC §2).

Imported only then, and by the parts that validate token specs (``web``): a beat process whose
settings are plain never loads pydantic (issue 29). The model is built from ``Settings``'s own
fields — their annotations, defaults, bounds and checks — so there is one definition of what a
valid setting is; ``TokenSpecModel`` checks a token's ``{"role", "name"}``.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from celery_durable_beat.exceptions import ConfigError, SettingProblem
from celery_durable_beat.redact import DEFAULT_KEYS, redact
from celery_durable_beat.setting_names import PLAIN, SettingNames
from celery_durable_beat.settings import (
    ACTOR_NAME_PATTERN,
    TOKENS_ENV,
    Role,
    Settings,
    TokenSpec,
)
from celery_durable_beat.urls import redact_url


class TokenSpecModel(BaseModel):
    """A token's ``{"role": …, "name": …}`` as configured (``settings.TokenSpec`` once valid)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Role
    name: str = Field(min_length=1, max_length=64, pattern=ACTOR_NAME_PATTERN)

    def spec(self) -> TokenSpec:
        return TokenSpec(role=self.role, name=self.name)


def token_spec(value: Mapping[str, Any]) -> TokenSpec:
    """A configured ``{"role", "name"}`` checked (pydantic's ``ValidationError`` if not)."""
    return TokenSpecModel.model_validate(value).spec()


@cache
def settings_model() -> type[BaseModel]:
    """``Settings``'s fields as a pydantic model: same names, types, defaults, bounds, checks."""
    hints = typing.get_type_hints(Settings)
    hints["api_tokens"] = dict[str, Role | TokenSpecModel] | None
    definitions: dict[str, Any] = {}
    validators: dict[str, Any] = {}
    for spec in dataclasses.fields(Settings):
        meta = spec.metadata
        definitions[spec.name] = (
            hints[spec.name],
            Field(spec.default, repr=spec.repr, **meta.get("bounds", {})),
        )
        for mode in ("before", "after"):
            if mode in meta:
                check = staticmethod(meta[mode])
                validators[f"_{spec.name}_{mode}"] = field_validator(spec.name, mode=mode)(check)
    return create_model(
        "Settings",
        __config__=ConfigDict(frozen=True, extra="forbid"),
        __validators__=validators,
        **definitions,
    )


def validated(given: Mapping[str, Any], names: SettingNames = PLAIN) -> dict[str, Any]:
    """Every setting converted as pydantic converts it; ``ConfigError`` naming each bad one as
    ``names`` says (as the user wrote it, ``CELERY_DURABLE_BEAT_LEASE_TTL``)."""
    values = dict(given)
    tokens = values.get("api_tokens")
    if isinstance(tokens, dict):  # a TokenSpec already made: checked again as its mapping
        values["api_tokens"] = {
            token: {"role": spec.role, "name": spec.name} if isinstance(spec, TokenSpec) else spec
            for token, spec in tokens.items()
        }
    try:
        model = settings_model()(**values)
    except ValidationError as exc:
        # one line per setting and problem: a union's branches each report the same one
        problems = dict.fromkeys(_problem(err, names) for err in exc.errors())
        raise ConfigError(list(problems)) from None
    taken = {name: getattr(model, name) for name in given}
    if taken["api_tokens"] is not None:
        taken["api_tokens"] = {
            token: spec.spec() if isinstance(spec, TokenSpecModel) else spec
            for token, spec in taken["api_tokens"].items()
        }
    return taken


def _problem(error: Any, names: SettingNames) -> SettingProblem:
    """One line naming the setting as written, its value (a URL without its password) and what
    is wrong."""
    name = str(error["loc"][0]) if error["loc"] else ""
    setting = names.of(name) if name else "durable_beat settings"
    value = error.get("input")
    if name == "api_tokens":
        return _tokens_problem(setting)
    if name.endswith("url") and isinstance(value, str):
        shown = redact_url(value)
    else:  # transport options may hold a sentinel password
        shown = repr(redact(value, DEFAULT_KEYS))
    return SettingProblem(
        entry="settings", field=setting, problem=f"{setting} = {shown}: {error['msg']}"
    )


def _tokens_problem(setting: str) -> SettingProblem:
    """Bad API tokens, named as written and never shown (a token must not reach a log): the
    environment variable's form when they came from there, the mapping's otherwise."""
    if setting == TOKENS_ENV:
        message = "must read role:token,role:token, each role viewer, operator or admin"
    else:
        message = (
            "must map each token to viewer, operator or admin, or to "
            '{"role": "operator", "name": "alice"} (a name of 1 to 64 printable characters) '
            f"({TOKENS_ENV} reads role:token,role:token)"
        )
    return SettingProblem(
        entry="settings", field=setting, problem=f"{setting} (tokens not shown): {message}"
    )
