"""Unit tests run on the in-memory store: no database, no server, milliseconds per test.

``store`` here is the in-memory backend alone (the root conftest's ``store`` spans every backend,
for the contract suites in ``tests/integration``).
"""

from __future__ import annotations

import pytest

from celery_durable_beat.store.memory import MemoryStore


@pytest.fixture
def store(memory_store: MemoryStore) -> MemoryStore:
    return memory_store
