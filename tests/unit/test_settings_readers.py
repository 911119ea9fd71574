"""The settings' two readers agree (issue 29): the plain reading in ``settings`` takes a value
exactly as the pydantic model in ``settings_model`` would return it, or leaves it to the model.

Why it matters: beat reads plain settings without importing pydantic, so a value the plain
reading took differently would make beat behave unlike ``durable-beat check`` and the web app.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from celery_durable_beat.exceptions import ConfigError
from celery_durable_beat.model import MissedPolicy
from celery_durable_beat.settings import SETTING_NAMES, Role, Settings, TokenSpec, _take_plain
from celery_durable_beat.settings_model import settings_model, validated

pytestmark = pytest.mark.unit

DEFAULTS = {spec.name: spec.default for spec in dataclasses.fields(Settings)}

# Per field: values of every kind a config may hold — plain, at and across each bound, of a
# neighbouring type (bool for int, str for a number), None, containers of the wrong kind.
NUMBERS: list[Any] = [-1, 0, 0.0, 0.5, 1, 1.0, 2, 3, 500, 65535, 65536, 100_000, 100_001]
NUMBERS += [True, False, "2", "x", b"1", math.inf, math.nan, 10**400, None, [1]]
CASES: dict[str, list[Any]] = {
    "url": ["postgresql://u:p@h/db", "", b"x", 1, None],
    "lease_url": ["redis://h:6379/1", "", 1, None],
    "lease_transport_options": [{"master_name": "m"}, {}, {"bad": 1}, {1: 2}, [], None],
    "default_missed": [MissedPolicy.RUN_ONCE, "run_once", "skip", "SKIP", "nope", 1, None],
    "sync_config": [True, False, 1, 0, "yes", "no", "x", None],
    "flower_url": ["http://flower:5555", 1, None],
    "api_tokens": [
        {"t": "viewer"},
        {"t": Role.ADMIN},
        {"t": TokenSpec(Role.OPERATOR, "bob")},
        {"t": {"role": "operator", "name": "alice"}},
        {"t": {"role": "operator", "name": ""}},
        {"t": {"role": "operator", "name": "a" * 64}},
        {"t": {"role": "operator", "name": "a" * 65}},
        {"t": {"role": "operator", "name": "line\n"}},
        {"t": {"role": "operator", "name": "tab\there"}},
        {"t": {"role": "root", "name": "x"}},
        {"t": {"role": "viewer"}},
        {"t": {"role": "viewer", "name": "x", "extra": 1}},
        {"t": "boss"},
        {1: "viewer"},
        "viewer:t",
        None,
    ],
    "redact": [("password",), ["token", "key"], [], "abc", [1], None],
}
NUMERIC = [name for name in SETTING_NAMES if name not in CASES]


def _both(name: str, value: Any) -> tuple[Any, Any]:
    """What the plain reading and the pydantic model make of ``name = value``."""
    given = {**DEFAULTS, name: value}
    plain = _take_plain(given)
    try:
        model: Any = validated(given)
    except (ConfigError, OverflowError) as exc:  # OverflowError: redeliver_after = 10**400
        model = exc
    return plain, model


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


@pytest.mark.parametrize(
    ("name", "value"),
    [(n, v) for n, values in CASES.items() for v in values]
    + [(n, v) for n in NUMERIC for v in NUMBERS],
)
def test_the_plain_reading_takes_a_value_as_the_model_does_or_leaves_it(
    name: str, value: Any
) -> None:
    plain, model = _both(name, value)
    if plain is None:
        return  # left to the model: Settings uses the model's answer, whatever it is
    assert not isinstance(model, Exception), f"plain took {value!r}, the model refuses it"
    for field in SETTING_NAMES:
        assert _same(plain[field], model[field]), (field, plain[field], model[field])
        if isinstance(plain[field], dict):
            for key, item in plain[field].items():
                assert _same(item, model[field][key]), (field, key)


def test_a_plain_config_is_read_without_the_model() -> None:
    """The values a hand-written config holds are all plain: nothing for pydantic to convert."""
    given = {
        **DEFAULTS,
        "url": "postgresql+psycopg://beat@db/beat",
        "lease_url": "sentinel://a:26379;sentinel://b:26379",
        "lease_transport_options": {"master_name": "m"},
        "lease_ttl": 15,
        "poll_interval": 0.5,
        "default_missed": "run_once",
        "metrics_port": 9808,
        "api_tokens": {"t" * 16: "viewer", "u" * 16: {"role": "admin", "name": "ops"}},
        "redact": ["password", "token"],
        "redeliver_after": 60,
    }
    assert _take_plain(given) is not None


def test_the_model_has_every_field_with_its_default_and_repr() -> None:
    fields = settings_model().model_fields
    assert tuple(fields) == SETTING_NAMES
    for spec in dataclasses.fields(Settings):
        assert fields[spec.name].default == spec.default, spec.name
        assert fields[spec.name].repr == spec.repr, spec.name


def test_a_converted_value_is_the_models() -> None:
    settings = Settings(lease_ttl="2.5", sync_config="no", batch_size=7.0)  # type: ignore[arg-type]
    assert (settings.lease_ttl, settings.sync_config, settings.batch_size) == (2.5, False, 7)
    assert type(settings.batch_size) is int


def test_a_bad_value_is_refused_in_the_models_words() -> None:
    with pytest.raises(ConfigError) as caught:
        Settings(batch_size=0, lease_ttl="soon")  # type: ignore[arg-type]
    assert [str(p) for p in caught.value.problems] == [
        "setting durable_beat_lease_ttl = 'soon': Input should be a valid number, unable to "
        "parse string as a number",
        "setting durable_beat_batch_size = 0: Input should be greater than or equal to 1",
    ]
