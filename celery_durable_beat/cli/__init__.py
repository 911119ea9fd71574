"""``celery -A proj durable-beat …``: the commands (``commands.py``) and their text (``format.py``).

The ``celery.commands`` entry point names ``celery_durable_beat.cli:durable_beat``.
"""

from __future__ import annotations

from celery_durable_beat.cli.commands import EXIT_CODES, durable_beat, one_line

__all__ = ["EXIT_CODES", "durable_beat", "one_line"]
