"""A throwaway PostgreSQL database per benchmark case, shared by the bench scripts."""

from __future__ import annotations

import uuid

import psycopg
from psycopg import sql


def make_db(admin: str) -> str:
    """Create an empty database next to ``admin``'s; its SQLAlchemy URL."""
    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin.replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return admin.rsplit("/", 1)[0] + "/" + name


def drop_db(admin: str, url: str) -> None:
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(admin.replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
