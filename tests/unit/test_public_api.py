"""The flat public surface: ``__all__`` sorted, every name importable."""

from __future__ import annotations

import pytest

import celery_durable_beat

pytestmark = pytest.mark.unit


def test_all_is_sorted_and_importable() -> None:
    names = celery_durable_beat.__all__
    assert list(names) == sorted(names)
    for name in names:
        assert getattr(celery_durable_beat, name) is not None


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = celery_durable_beat.nope  # type: ignore[attr-defined]
