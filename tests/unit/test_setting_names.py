"""Settings through Celery's namespace, named as written (SPEC §16).

A Django project writes ``CELERY_DURABLE_BEAT_LEASE_TTL`` in its settings module; Celery's
lookup reads it for ``durable_beat_lease_ttl`` under the ``CELERY`` namespace. Each kind of
setting (a URL, a number, a mapping, the tokens, the namespace) is read right that way, and a
bad one is reported under the name the user wrote, the line they have to find and fix. Without
a namespace, and for ``Settings(...)`` built with keywords, the names stay ``durable_beat_*``.
"""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery

from celery_durable_beat.control.check import check_config, lenient_settings
from celery_durable_beat.exceptions import ConfigError
from celery_durable_beat.setting_names import matched, written_name
from celery_durable_beat.settings import SETTING_NAMES, Role, Settings
from celery_durable_beat.web.auth import NoTokens, ShortToken, Tokens

pytestmark = pytest.mark.unit

TOKEN = "t" * 24


class DjangoLike:
    """A settings module's shape: upper-case names, read with ``namespace="CELERY"``."""

    def __init__(self, **settings: Any) -> None:
        self.__dict__.update(settings)


def namespaced(**settings: Any) -> Celery:
    app = Celery("names", set_as_current=False)
    app.config_from_object(DjangoLike(**settings), namespace="CELERY")
    return app


def refusal(app: Celery) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        Settings.from_conf(app.conf, environ={})
    return caught.value


@pytest.mark.parametrize(
    ("written", "good", "field", "read", "bad", "says"),
    [
        (  # a URL
            "CELERY_DURABLE_BEAT_LEASE_URL",
            "redis://lease:6379/1",
            "lease_url",
            "redis://lease:6379/1",
            "http://lease:6379/1",
            "CELERY_DURABLE_BEAT_LEASE_URL = http://lease:6379/1: uses 'http'",
        ),
        (  # a number
            "CELERY_DURABLE_BEAT_LEASE_TTL",
            "12",
            "lease_ttl",
            12.0,
            -5,
            "CELERY_DURABLE_BEAT_LEASE_TTL = -5: Input should be greater than 0",
        ),
        (  # a mapping
            "CELERY_DURABLE_BEAT_LEASE_TRANSPORT_OPTIONS",
            {"master_name": "mymaster"},
            "lease_transport_options",
            {"master_name": "mymaster"},
            {"master": "mymaster"},
            "CELERY_DURABLE_BEAT_LEASE_TRANSPORT_OPTIONS = {'master': 'mymaster'}: Value error, "
            "unknown keys ['master']",
        ),
        (  # the tokens: never shown
            "CELERY_DURABLE_BEAT_API_TOKENS",
            {TOKEN: "viewer"},
            "api_tokens",
            {TOKEN: Role.VIEWER},
            {TOKEN: "boss"},
            "CELERY_DURABLE_BEAT_API_TOKENS (tokens not shown): must map each token",
        ),
        (  # the namespace setting, just added
            "CELERY_DURABLE_BEAT_NAMESPACE",
            "billing",
            "namespace",
            "billing",
            "Billing!",
            "CELERY_DURABLE_BEAT_NAMESPACE = 'Billing!': Value error, must be 1 to 40 characters",
        ),
    ],
    ids=["url", "number", "mapping", "tokens", "namespace"],
)
def test_each_kind_is_read_under_the_namespace_and_named_as_written(
    written: str, good: Any, field: str, read: Any, bad: Any, says: str
) -> None:
    settings = Settings.from_conf(namespaced(**{written: good}).conf, environ={})
    assert getattr(settings, field) == read
    assert settings.names.of(field) == written
    assert "CELERY_" not in repr(settings)  # names are not settings: never shown
    (problem,) = refusal(namespaced(**{written: bad})).problems
    assert problem.field == written
    assert str(problem).startswith(f"setting {says}")
    assert TOKEN not in str(problem)


def test_the_store_url_is_read_under_the_namespace_and_the_environment_still_wins() -> None:
    app = namespaced(CELERY_DURABLE_BEAT_URL="sqlite:////srv/beat.sqlite3")
    assert Settings.from_conf(app.conf, environ={}).url == "sqlite:////srv/beat.sqlite3"
    env = {"DURABLE_BEAT_URL": "postgresql://beat@db/beat"}
    from_env = Settings.from_conf(app.conf, environ=env)
    assert (from_env.url, from_env.names.of("url")) == (env["DURABLE_BEAT_URL"], "DURABLE_BEAT_URL")


def test_a_sentinel_lease_without_its_master_names_the_options_as_they_are_written() -> None:
    app = namespaced(CELERY_DURABLE_BEAT_LEASE_URL="sentinel://s1:26379;sentinel://s2:26379")
    (problem,) = refusal(app).problems
    assert problem.field == "CELERY_DURABLE_BEAT_LEASE_TRANSPORT_OPTIONS"
    assert str(problem).startswith("setting CELERY_DURABLE_BEAT_LEASE_URL = sentinel://")
    assert 'set CELERY_DURABLE_BEAT_LEASE_TRANSPORT_OPTIONS = {"master_name"' in str(problem)


def test_two_settings_refused_together_are_both_named_as_written_or_would_be() -> None:
    """``redeliver_after`` against ``dedup_ttl``: the one left unset is named as the user would
    write it in this project (the namespaced form), since that is the line the fix adds."""
    (problem,) = refusal(namespaced(CELERY_DURABLE_BEAT_REDELIVER_AFTER=90_000)).problems
    assert problem.field == "CELERY_DURABLE_BEAT_REDELIVER_AFTER"
    assert str(problem).startswith(
        "setting CELERY_DURABLE_BEAT_REDELIVER_AFTER = 90000 must be shorter than "
        "CELERY_DURABLE_BEAT_DEDUP_TTL (86400 s)"
    )


def test_without_a_namespace_and_with_keywords_the_names_are_the_docs() -> None:
    app = Celery("plain", set_as_current=False)
    app.conf.durable_beat_lease_ttl = -5
    (problem,) = refusal(app).problems
    assert problem.field == "durable_beat_lease_ttl"
    with pytest.raises(ConfigError, match="setting durable_beat_lease_ttl = -5"):
        Settings(lease_ttl=-5)
    assert Settings(lease_ttl=3).names.of("lease_ttl") == "durable_beat_lease_ttl"
    mixed = namespaced()  # a namespaced app whose code sets a setting by its plain name
    mixed.conf.durable_beat_lease_ttl = -5
    assert [p.field for p in refusal(mixed).problems] == ["durable_beat_lease_ttl"]


def test_names_change_no_value_and_no_equality() -> None:
    from_conf = Settings.from_conf(namespaced(CELERY_DURABLE_BEAT_LEASE_TTL=12).conf, environ={})
    assert from_conf == Settings(lease_ttl=12)
    assert {from_conf.names.of(name) for name in SETTING_NAMES} == {
        f"CELERY_DURABLE_BEAT_{name.upper()}" for name in SETTING_NAMES
    }


def test_lenient_settings_keep_the_valid_ones_and_the_names() -> None:
    app = namespaced(CELERY_DURABLE_BEAT_LEASE_TTL=-5, CELERY_DURABLE_BEAT_HISTORY_KEEP=7)
    lenient = lenient_settings(app.conf)
    assert (lenient.lease_ttl, lenient.history_keep) == (30.0, 7)
    assert lenient.names.of("history_keep") == "CELERY_DURABLE_BEAT_HISTORY_KEEP"


def test_checks_advice_names_settings_as_written() -> None:
    app = namespaced(
        CELERY_BROKER_URL="redis://broker:6379/0",
        CELERY_BEAT_MAX_LOOP_INTERVAL=30,
        CELERY_BEAT_SCHEDULE_FILENAME="/var/run/beat-schedule",
    )
    advice = check_config(app).recommendations
    assert any(a.startswith("CELERY_DURABLE_BEAT_REDELIVER_AFTER is unset") for a in advice)
    assert any(
        a.startswith("CELERY_BEAT_MAX_LOOP_INTERVAL = 30 has no effect")
        and "at most CELERY_DURABLE_BEAT_POLL_INTERVAL" in a
        for a in advice
    )
    assert any(
        a.startswith("CELERY_BEAT_SCHEDULE_FILENAME = '/var/run/beat-schedule' is ignored")
        and "in CELERY_DURABLE_BEAT_URL" in a
        for a in advice
    )
    assert not any("durable_beat_" in a for a in advice)


def test_serves_token_refusals_name_the_setting_as_written() -> None:
    settings = Settings.from_conf(namespaced().conf, environ={})
    written = settings.names.of("api_tokens")
    with pytest.raises(NoTokens, match="set CELERY_DURABLE_BEAT_API_TOKENS = "):
        Tokens(settings.api_tokens, written)
    with pytest.raises(ShortToken, match=r"^CELERY_DURABLE_BEAT_API_TOKENS \(or DURABLE_BEAT"):
        Tokens({"short": Role.ADMIN}, written)


def test_the_matched_key_is_the_one_celery_reads() -> None:
    app = namespaced(CELERY_DURABLE_BEAT_URL="sqlite:///a.sqlite3")
    app.conf.durable_beat_url = "sqlite:///b.sqlite3"  # code's changes come first, as in Celery
    found = matched(app.conf, "durable_beat_url")
    assert found is not None
    assert app.conf.get(found.key) == app.conf.get("durable_beat_url") == "sqlite:///b.sqlite3"
    assert found.key == "durable_beat_url"
    assert written_name(app.conf, "durable_beat_batch_size") == "CELERY_DURABLE_BEAT_BATCH_SIZE"
    assert written_name({"durable_beat_url": "x"}, "durable_beat_url") == "durable_beat_url"
