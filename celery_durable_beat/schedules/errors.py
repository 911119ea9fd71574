"""The error every schedule reader raises, in a module of its own so that each kind's module
(cron and intervals in :mod:`~celery_durable_beat.schedules.spec`, solar, recurrence rules,
custom classes) can raise it without importing the module that unites the kinds."""

from __future__ import annotations


class SpecError(ValueError):
    """A schedule value that cannot be understood; the message says what to write instead."""
