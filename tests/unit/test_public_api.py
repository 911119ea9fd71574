"""The flat public surface: ``__all__`` sorted, every name importable."""

from __future__ import annotations

import types

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


SPEC_PUBLIC = {
    # SPEC §1 (the scheduler), §6 (the worker side), §8 (the control API), §4 (tick ids) and the
    # exceptions users catch. FrozenBeat is public through ``celery_durable_beat.testing`` (§11).
    "Scheduler",
    "install",
    "periodic_origin",
    "DurableBeat",
    "tick_task_id",
    "ConfigError",
    "DurableBeatError",
    "ScheduleNotFound",
}


def test_all_equals_the_public_names() -> None:
    """httpx's ``test_exported_members``: ``__all__`` is exactly the public surface, and no
    other public name leaks out of the package's namespace."""
    assert set(celery_durable_beat.__all__) == SPEC_PUBLIC
    leaked = {
        name
        for name, value in vars(celery_durable_beat).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)  # submodules bound by their own import
        and name != "annotations"  # ``from __future__ import annotations``
    }
    assert leaked <= SPEC_PUBLIC, f"public names missing from __all__: {leaked - SPEC_PUBLIC}"


def test_testing_module_exports_frozen_beat() -> None:
    from celery_durable_beat import testing

    assert "FrozenBeat" in testing.__all__
    for name in testing.__all__:
        assert getattr(testing, name) is not None
