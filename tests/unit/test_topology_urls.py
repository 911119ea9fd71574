"""Production topologies' URLs (SPEC §7): the lease URL forms Celery's Redis settings take, the
settings check that refuses a sentinel URL without its master, and redaction of every form,
the ``;``-joined sentinel list and multi-host PostgreSQL included. Pure: nothing connects."""

from __future__ import annotations

import pytest

from celery_durable_beat.exceptions import ConfigError
from celery_durable_beat.redis_client import (
    SentinelOptions,
    checked_url,
    connect,
    parse_sentinel,
    problem,
)
from celery_durable_beat.runs.factory import dedup_redis
from celery_durable_beat.settings import Settings
from celery_durable_beat.urls import UNPARSEABLE, redact_url

pytestmark = pytest.mark.unit

SENTINELS = "sentinel://:s3cret@h1:26379/2;sentinel://h2:26380;sentinel://h3"


def _settings(**values: object) -> Settings:
    return Settings.from_conf({f"durable_beat_{k}": v for k, v in values.items()}, environ={})


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
        ("rediss://user:pw@h:6380/1?ssl_cert_reqs=required", None),
        ("redis://h:6379/0", "redis://h:6379/0"),
        ("redis://:p@ss@h/0", "redis://:***@h/0"),
        (SENTINELS, "sentinel://:***@h1:26379/2;sentinel://h2:26380;sentinel://h3"),
        ("sentinel://:a@h1;sentinel://:b@h2", "sentinel://:***@h1;sentinel://:***@h2"),
        (
            "postgresql+psycopg://u:pw@/db?host=h1:5432&host=h2:5433&target_session_attrs=read-write",
            "postgresql+psycopg://u:***@/db?host=h1:5432&host=h2:5433&target_session_attrs=read-write",
        ),
        ("postgresql://u:pw@h1:5432,h2:5433/db", "postgresql://u:***@h1:5432,h2:5433/db"),
        (
            "postgresql://u@h/db?password=pw&sslmode=require",
            "postgresql://u@h/db?password=***&sslmode=require",
        ),
        ("unix:///run/redis.sock?db=1&password=pw", "unix:///run/redis.sock?db=1&password=***"),
        ("sqlite:///x.sqlite3", "sqlite:///x.sqlite3"),
    ],
)
def test_redact_url_hides_every_password(url: str, shown: str | None) -> None:
    result = redact_url(url)
    assert "pw" not in result and "s3cret" not in result and ":a@" not in result
    if shown is not None:
        assert result == shown


def test_redact_url_echoes_nothing_it_cannot_parse() -> None:
    assert redact_url("just-a-secret") == UNPARSEABLE
    assert redact_url("pw@host:6379") == UNPARSEABLE
    assert "pw" not in redact_url("redis://[::1:pw@h")


def test_a_sentinel_url_gives_every_sentinel_and_the_first_parts_db_and_password() -> None:
    parsed = parse_sentinel(SENTINELS)
    assert parsed.sentinels == (("h1", 26379), ("h2", 26380), ("h3", 26379))
    assert (parsed.db, parsed.password, parsed.username) == (2, "s3cret", None)


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("sentinel://h1;redis://h2", "every ;-separated part"),
        ("sentinel://h1:port", "not a number"),
        ("sentinel://h1/zero", "is a number"),
        ("sentinel://:pw@/0", "names no host"),
    ],
)
def test_a_malformed_sentinel_url_is_refused(url: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_sentinel(url)


def test_transport_options_give_the_master_and_ignore_broker_keys() -> None:
    picked = SentinelOptions.pick(
        {"master_name": "m", "sentinel_kwargs": {"password": "x"}, "visibility_timeout": 9}
    )
    assert picked == SentinelOptions("m", {"password": "x"}, 0)
    assert SentinelOptions.pick({"visibility_timeout": 9}) is None
    assert SentinelOptions.pick(None) is None


@pytest.mark.parametrize(
    ("given", "read"),
    [("CERT_REQUIRED", "required"), ("CERT_NONE", "none"), ("optional", "optional")],
)
def test_celerys_spellings_of_ssl_cert_reqs_are_read(given: str, read: str) -> None:
    url = f"rediss://h:6380/0?ssl_cert_reqs={given}&ssl_ca_certs=%2Fca.pem"
    assert checked_url(url) == f"rediss://h:6380/0?ssl_cert_reqs={read}&ssl_ca_certs=%2Fca.pem"


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("redis://h/0?ssl_ca_certs=/ca.pem", "need a rediss:// URL"),
        ("rediss://h/0?ssl_cert_reqs=maybe", "write required, optional or none"),
        ("http://u:pw@h/0", "uses 'http'"),
        ("h:6379", "uses 'no scheme'"),
    ],
)
def test_problem_names_the_fix(url: str, fragment: str) -> None:
    found = problem(url, None)
    assert found is not None and fragment in found and "pw" not in found


def test_every_accepted_form_builds_a_client_without_connecting() -> None:
    for url in ("redis://h:1/0", "rediss://h:1/0?ssl_cert_reqs=none", "unix:///tmp/r.sock"):
        connect(url, timeout=0.5).close()
    client = connect(SENTINELS, {"master_name": "m"}, timeout=0.5)
    pool = client.connection_pool
    assert pool.service_name == "m" and pool.connection_kwargs["db"] == 2
    assert pool.connection_kwargs["socket_timeout"] == 0.25  # half for the master
    client.close()


def test_a_sentinel_lease_without_master_name_is_refused_at_start() -> None:
    with pytest.raises(ConfigError) as refused:
        _settings(lease_url=SENTINELS)
    text = str(refused.value)
    assert "durable_beat_lease_transport_options" in text and '"master_name"' in text
    assert "s3cret" not in text
    assert refused.value.problems[0].field == "durable_beat_lease_transport_options"


def test_unknown_transport_option_keys_are_refused_without_showing_secrets() -> None:
    with pytest.raises(ConfigError) as refused:
        _settings(
            lease_url=SENTINELS,
            lease_transport_options={"master": "m", "sentinel_kwargs": {"password": "s3cret"}},
        )
    text = str(refused.value)
    assert "unknown keys ['master']" in text and "master_name" in text
    assert "s3cret" not in text


def test_a_sentinel_lease_with_its_master_is_accepted_and_its_options_never_shown() -> None:
    options = {"master_name": "m", "sentinel_kwargs": {"password": "s3cret"}}
    settings = _settings(lease_url="sentinel://h1;sentinel://h2", lease_transport_options=options)
    assert settings.lease_transport_options == options
    assert "s3cret" not in repr(settings)


def test_a_lease_url_no_client_can_use_is_refused_at_start() -> None:
    with pytest.raises(ConfigError, match="durable_beat_lease_url") as refused:
        _settings(lease_url="rediss://:pw@h/0?ssl_cert_reqs=sometimes")
    assert "pw@" not in str(refused.value)


class _App:
    def __init__(self, broker: str, **conf: object) -> None:
        self.conf = {"broker_url": broker, **conf}


def test_claims_follow_a_sentinel_lease_or_a_sentinel_broker_with_its_master() -> None:
    leased = Settings(lease_url=SENTINELS, lease_transport_options={"master_name": "m"})
    assert dedup_redis(_App("amqp://rabbit//"), leased) == (SENTINELS, {"master_name": "m"})
    broker_options = {"master_name": "b", "visibility_timeout": 60}
    sentinel_broker = _App(SENTINELS, broker_transport_options=broker_options)
    assert dedup_redis(sentinel_broker, Settings()) == (SENTINELS, broker_options)
    # Without the master's name the broker's sentinels cannot be used: claims stay in the store.
    assert dedup_redis(_App(SENTINELS), Settings()) is None


def test_the_settings_repr_hides_the_passwords_of_its_urls() -> None:
    settings = Settings(
        url="postgresql+psycopg://beat:s3cret-store@db:5432/beat",
        lease_url="redis://:s3cret-lease@cache:6379/1",
    )
    shown = repr(settings)
    assert "s3cret" not in shown and str(settings).count("s3cret") == 0
    assert "postgresql+psycopg://beat:***@db:5432/beat" in shown
    assert "redis://:***@cache:6379/1" in shown
    assert settings.url.endswith("s3cret-store@db:5432/beat")  # the value itself is untouched
