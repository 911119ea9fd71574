"""Tokens, roles, console sessions and CSRF for ``serve`` (SPEC §9), and the setting they come
from."""

from __future__ import annotations

import logging

import pytest

from celery_durable_beat.exceptions import ConfigError
from celery_durable_beat.settings import Role, Settings
from celery_durable_beat.web.auth import NoTokens, ShortToken, Tokens, allows, bearer
from celery_durable_beat.web.limits import NoQueryInAccessLog
from celery_durable_beat.web.session import (
    FREE_FAILURES,
    LONGEST_WAIT,
    SESSION_TTL,
    Sessions,
    SignInThrottle,
    same_text,
)

pytestmark = pytest.mark.unit

A = "viewer-token-0123456789"
B = "admin-token-0123456789"


def test_tokens_resolve_roles_and_nothing_else() -> None:
    tokens = Tokens({A: Role.VIEWER, B: Role.ADMIN})
    assert tokens.role_of(A) is Role.VIEWER
    assert tokens.role_of(B) is Role.ADMIN
    for wrong in ("", None, A[:-1], A + " ", A.upper(), B + "\x00", "ünï\udcff"):
        assert tokens.role_of(wrong) is None, wrong


def test_a_token_shorter_than_16_characters_is_refused_naming_the_setting_not_the_token() -> None:
    with pytest.raises(ShortToken) as caught:
        Tokens({A: Role.ADMIN, "x": Role.VIEWER})
    text = str(caught.value)
    assert "durable_beat_api_tokens" in text and "16" in text and "viewer" in text
    assert "'x'" not in text and A not in text
    Tokens({"s" * 16: Role.VIEWER})  # 16 is enough


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


def test_csrf_comparison_takes_any_text_without_failing() -> None:
    assert same_text("abc", "abc")
    for wrong in (None, "", "abd", "ünïcode", "\udcff", "abc\x00"):
        assert not same_text("abc", wrong), wrong


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_cookie_is_opaque_signed_and_holds_no_token() -> None:
    sessions = Sessions(clock=Clock())
    session, cookie = sessions.start(Role.OPERATOR)
    assert sessions.find(cookie) == session and session.role is Role.OPERATOR
    assert A not in cookie and session.csrf not in cookie
    sid, expiry, mac = cookie.split(".")
    for forged in (
        f"{sid}.{int(expiry) + 3600}.{mac}",  # a longer life
        f"{sid}.{expiry}.{mac[:-1]}{'1' if mac.endswith('0') else '0'}",
        f"{sid}x.{expiry}.{mac}",
        "",
        None,
        "a.b",
        "ü.ü.ü",
    ):
        assert sessions.find(forged) is None, forged
    assert Sessions(clock=Clock()).find(cookie) is None  # another process's key: not ours


def test_a_session_expires_after_12_hours_and_sign_out_ends_it_on_the_server() -> None:
    clock = Clock()
    sessions = Sessions(clock=clock)
    assert sessions.ttl == SESSION_TTL == 12 * 3600
    _, cookie = sessions.start(Role.VIEWER)
    clock.now += SESSION_TTL - 1
    assert sessions.find(cookie) is not None
    clock.now += 1
    assert sessions.find(cookie) is None
    _, cookie = sessions.start(Role.VIEWER)
    sessions.end(cookie)
    assert sessions.find(cookie) is None  # the cookie replayed after sign-out signs nobody in


def test_each_sign_in_draws_a_new_id_and_csrf_value() -> None:
    sessions = Sessions()
    first, one = sessions.start(Role.VIEWER)
    second, two = sessions.start(Role.VIEWER)
    assert first.id != second.id and first.csrf != second.csrf and one != two


def test_the_session_table_is_bounded() -> None:
    sessions = Sessions(most=3)
    cookies = [sessions.start(Role.VIEWER)[1] for _ in range(5)]
    assert [sessions.find(c) is not None for c in cookies] == [False, False, True, True, True]


def test_sign_in_failures_are_slowed_per_address_without_sleeping() -> None:
    clock = Clock()
    throttle = SignInThrottle(clock=clock)
    for _ in range(FREE_FAILURES):
        assert throttle.wait("10.0.0.1") == 0
        throttle.failed("10.0.0.1")
    assert throttle.wait("10.0.0.1") == 0
    throttle.failed("10.0.0.1")
    assert throttle.wait("10.0.0.1") == 1.0
    assert throttle.wait("10.0.0.2") == 0  # another address is not slowed
    clock.now += 1
    throttle.failed("10.0.0.1")
    assert throttle.wait("10.0.0.1") == 2.0  # doubling
    throttle.succeeded("10.0.0.1")
    assert throttle.wait("10.0.0.1") == 0


def test_a_patient_guesser_waits_at_most_the_longest_wait() -> None:
    clock = Clock()
    throttle = SignInThrottle(clock=clock)
    for _ in range(2000):  # one failure every 15 min for three weeks: never forgotten
        throttle.failed("10.0.0.9")
        clock.now += LONGEST_WAIT
    throttle.failed("10.0.0.9")
    assert throttle.wait("10.0.0.9") == LONGEST_WAIT  # it overflowed a float past 1,024


def test_settings_read_tokens_from_config_and_the_environment_wins() -> None:
    conf = {"durable_beat_api_tokens": {"c1": "viewer"}}  # length is checked by serve
    assert Settings.from_conf(conf, environ={}).api_tokens == {"c1": Role.VIEWER}
    env = {"DURABLE_BEAT_API_TOKENS": "admin:e1, operator:e2"}
    got = Settings.from_conf(conf, environ=env).api_tokens
    assert got == {"e1": Role.ADMIN, "e2": Role.OPERATOR}
    assert "e1" not in repr(Settings.from_conf(conf, environ=env))


@pytest.mark.parametrize(
    ("conf", "env", "named"),
    [
        ({"durable_beat_api_tokens": {"s3cr3t-value": "boss"}}, {}, "durable_beat_api_tokens"),
        ({}, {"DURABLE_BEAT_API_TOKENS": "s3cr3t-value"}, "DURABLE_BEAT_API_TOKENS"),
        ({}, {"DURABLE_BEAT_API_TOKENS": "chief:s3cr3t-value"}, "DURABLE_BEAT_API_TOKENS"),
    ],
)
def test_a_bad_token_setting_is_named_without_showing_a_token(
    conf: dict[str, object], env: dict[str, str], named: str
) -> None:
    """Named where the value came from: the config's setting, or the environment variable."""
    with pytest.raises(ConfigError) as caught:
        Settings.from_conf(conf, environ=env)
    text = str(caught.value)
    assert f"setting {named} (tokens not shown)" in text and "s3cr3t-value" not in text
    assert [p.field for p in caught.value.problems] == [named]


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
