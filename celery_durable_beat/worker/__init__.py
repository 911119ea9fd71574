"""The worker side (SPEC §6): ``install(app)``, ``periodic_origin``, the dedup guard, overlap.

``hooks.py`` wires the guard into an app's tasks and signals; ``guard.py`` is the per-process
runtime that claims ticks through the runs port (``runs/base.py``); ``origin.py`` reads the tick
headers; ``overlap.py`` is the beat-side gate that consults the previous tick's run.
"""

from __future__ import annotations

from celery_durable_beat.worker.hooks import counters, install, shared_counters
from celery_durable_beat.worker.origin import PeriodicOrigin, periodic_origin

__all__ = ["PeriodicOrigin", "counters", "install", "periodic_origin", "shared_counters"]
