"""The worker side (SPEC §6): ``install(app)``, ``periodic_origin``, the dedup guard.

What runs in a worker process only: ``hooks.py`` wires the guard into an app's tasks and
signals; ``guard.py`` is the per-process runtime that claims ticks through the runs port
(``runs/base.py``); ``origin.py`` reads the tick headers; ``presence.py`` announces the worker and
its queues. The beat-side decisions that read what workers record (overlap, unknown tasks,
failing streaks, live queues) are ``gates/``.

The names below are imported on first use: importing the package must not pay for the worker's
hooks and guard (issue #16: a process imports only what it runs).
"""

from __future__ import annotations

import typing as _typing

if _typing.TYPE_CHECKING:
    from celery_durable_beat.worker.hooks import counters, install, shared_counters
    from celery_durable_beat.worker.origin import PeriodicOrigin, periodic_origin

__all__ = ["PeriodicOrigin", "counters", "install", "periodic_origin", "shared_counters"]

_HOOKS = frozenset({"counters", "install", "shared_counters"})
_ORIGIN = frozenset({"PeriodicOrigin", "periodic_origin"})


def __getattr__(name: str) -> _typing.Any:
    if name in _HOOKS:
        from celery_durable_beat.worker import hooks

        return getattr(hooks, name)
    if name in _ORIGIN:
        from celery_durable_beat.worker import origin

        return getattr(origin, name)
    raise AttributeError(f"module 'celery_durable_beat.worker' has no attribute {name!r}")
