"""The SQL store on PostgreSQL and SQLite: ``store.py`` (connections and transactions, the
``Store`` port), ``engine.py`` (URLs, engines, the store clock), ``round.py`` (the round's hot
path), ``admin.py`` (control-plane queries), ``schema.py`` (Alembic)."""

from __future__ import annotations

from celery_durable_beat.store.sql.store import SqlClaim, SqlStore

__all__ = ["SqlClaim", "SqlStore"]
