"""What every PostgreSQL connection of the store carries, as libpq reports it (real server)."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from sqlalchemy import make_url

from celery_durable_beat.exceptions import InvalidArgument
from celery_durable_beat.store.sql import SqlStore
from celery_durable_beat.store.sql.engine import PG_TCP_DEFAULTS, build_engine, normalize_url
from tests.support.procs import free_port

pytestmark = pytest.mark.integration


def _parameters(url: str) -> dict[str, str]:
    engine = build_engine(make_url(url))
    try:
        with engine.connect() as conn:
            raw = conn.connection.driver_connection
            assert raw is not None
            return dict(raw.info.get_parameters())
    finally:
        engine.dispose()


def test_connections_detect_a_vanished_peer_and_the_url_wins(pg_url: str) -> None:
    """TCP keepalives and a user timeout bound how long a partition can block beat."""
    found = _parameters(pg_url)
    assert {k: found.get(k) for k in PG_TCP_DEFAULTS} == {
        k: str(v) for k, v in PG_TCP_DEFAULTS.items()
    }
    assert found["connect_timeout"] == "10"
    separator = "&" if "?" in pg_url else "?"
    own = _parameters(f"{pg_url}{separator}keepalives_idle=7&tcp_user_timeout=9000")
    assert (own["keepalives_idle"], own["tcp_user_timeout"]) == ("7", "9000")


def test_a_multi_host_url_reaches_the_host_that_takes_writes_with_the_same_settings(
    pg_url: str,
) -> None:
    """SPEC §7: libpq's multi-host form, in SQLAlchemy's spelling, with the first host down; the
    store's defaults apply to it as to one host, and the store itself works on it."""
    parsed = make_url(pg_url)
    database = parsed.database
    user = quote(parsed.username or "postgres", safe="")
    if parsed.password:
        user += ":" + quote(str(parsed.password), safe="")
    dead = free_port()
    url = (
        f"postgresql+psycopg://{user}@/{database}?host=127.0.0.1:{dead}"
        f"&host={parsed.host}:{parsed.port or 5432}&target_session_attrs=read-write"
    )
    found = _parameters(url)
    assert {k: found.get(k) for k in PG_TCP_DEFAULTS} == {
        k: str(v) for k, v in PG_TCP_DEFAULTS.items()
    }
    assert found["target_session_attrs"] == "read-write"
    store = SqlStore(url)
    try:
        store.ensure_schema()
        assert store.now_ms() > 0
    finally:
        store.close()


def test_libpqs_comma_form_is_refused_with_the_form_that_works() -> None:
    with pytest.raises(InvalidArgument, match=r"\?host=h1:5432&host=h2:5432") as refused:
        normalize_url("postgresql://beat:s3cret@db1:5432,db2:5432/beat")
    assert "s3cret" not in str(refused.value)
