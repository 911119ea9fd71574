"""Alembic migrations of the SQL store: one linear history, run programmatically by ``SqlStore``."""
