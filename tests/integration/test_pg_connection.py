"""What every PostgreSQL connection of the store carries, as libpq reports it (real server)."""

from __future__ import annotations

import pytest
from sqlalchemy import make_url

from celery_durable_beat.store.sql.engine import PG_TCP_DEFAULTS, build_engine

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
