"""Tokens, roles and CSRF for ``serve`` (SPEC §9), and the setting they come from."""

from __future__ import annotations

import logging

import pytest

from celery_durable_beat.exceptions import ConfigError
from celery_durable_beat.settings import Role, Settings
from celery_durable_beat.web.auth import NoTokens, Tokens, allows, bearer, csrf_ok, csrf_token
from celery_durable_beat.web.limits import NoQueryInAccessLog

pytestmark = pytest.mark.unit


def test_tokens_resolve_roles_and_nothing_else() -> None:
    tokens = Tokens({"a-token": Role.VIEWER, "b-token": Role.ADMIN})
    assert tokens.role_of("a-token") is Role.VIEWER
    assert tokens.role_of("b-token") is Role.ADMIN
    for wrong in ("", None, "a-toke", "a-token ", "A-TOKEN", "b-token\x00"):
        assert tokens.role_of(wrong) is None, wrong


def test_no_token_configured_is_refused_naming_the_setting() -> None:
    for empty in (None, {}):
        with pytest.raises(NoTokens, match=r"durable_beat_api_tokens.*DURABLE_BEAT_API_TOKENS"):
            Tokens(empty)


def test_roles_are_cumulative() -> None:
    assert allows(Role.ADMIN, Role.OPERATOR) and allows(Role.OPERATOR, Role.VIEWER)
    assert not allows(Role.VIEWER, Role.OPERATOR) and not allows(Role.OPERATOR, Role.ADMIN)
    assert not allows(None, Role.VIEWER)


def test_bearer_reads_only_the_bearer_scheme() -> None:
    assert bearer("Bearer abc") == "abc" and bearer("bearer  abc ") == "abc"
    assert bearer("Basic abc") is None and bearer(None) is None and bearer("Bearer ") is None


def test_csrf_token_is_bound_to_the_session_token() -> None:
    mine = csrf_token("tok-1")
    assert csrf_ok("tok-1", mine)
    assert not csrf_ok("tok-2", mine) and not csrf_ok("tok-1", None) and not csrf_ok("tok-1", "")


def test_settings_read_tokens_from_config_and_the_environment_wins() -> None:
    conf = {"durable_beat_api_tokens": {"c1": "viewer"}}
    assert Settings.from_conf(conf, environ={}).api_tokens == {"c1": Role.VIEWER}
    env = {"DURABLE_BEAT_API_TOKENS": "admin:e1, operator:e2"}
    got = Settings.from_conf(conf, environ=env).api_tokens
    assert got == {"e1": Role.ADMIN, "e2": Role.OPERATOR}
    assert "e1" not in repr(Settings.from_conf(conf, environ=env))


@pytest.mark.parametrize(
    ("conf", "env"),
    [
        ({"durable_beat_api_tokens": {"s3cr3t-value": "boss"}}, {}),
        ({}, {"DURABLE_BEAT_API_TOKENS": "s3cr3t-value"}),
        ({}, {"DURABLE_BEAT_API_TOKENS": "chief:s3cr3t-value"}),
    ],
)
def test_a_bad_token_setting_is_named_without_showing_a_token(
    conf: dict[str, object], env: dict[str, str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_conf(conf, environ=env)
    text = str(caught.value)
    assert "durable_beat_api_tokens" in text and "s3cr3t-value" not in text


def test_access_log_lines_lose_their_query_string() -> None:
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "GET", "/api/v1/status?token=abc", "1.1", 401),
        None,
    )
    assert NoQueryInAccessLog().filter(record)
    assert "abc" not in record.getMessage() and "/api/v1/status" in record.getMessage()
