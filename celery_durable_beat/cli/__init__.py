"""``celery -A proj durable-beat …``: the commands (``commands.py``) and their text (``format.py``).

The ``celery.commands`` entry point names ``celery_durable_beat.cli:durable_beat``. Celery loads
every such entry point whenever its CLI starts, so each ``celery beat`` and ``celery worker``
loads this module: it holds only a stand-in for the group, and the verbs (with the control API,
the importers and the text formatting behind them) are imported when ``durable-beat`` is first
run or listed (issue 29: a beat process does not load them).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import click

__all__ = ["EXIT_CODES", "durable_beat", "one_line"]

HELP = "Operate durable beat schedules: list, inspect, pause, resume, run now, audit."
"""The group's one line in ``celery --help``, shown without importing the verbs."""


def _verbs() -> click.Group:
    from celery_durable_beat.cli.commands import durable_beat as verbs

    return verbs


class _Verbs(click.Group):
    """``durable-beat`` as Celery registers it: everything past its name and help line is the
    group in ``commands.py``, imported on first use. ``make_context`` hands Click that group's
    context, so parsing, ``--help``, errors and the verbs are its own."""

    @property
    def commands(self) -> MutableMapping[str, click.Command]:
        return _verbs().commands

    @commands.setter
    def commands(self, value: MutableMapping[str, click.Command]) -> None:
        """Click's ``__init__`` assigns an empty mapping: the verbs live on the real group."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        return _verbs().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        return _verbs().invoke(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return _verbs().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return _verbs().list_commands(ctx)

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        _verbs().add_command(cmd, name)


durable_beat: click.Group = _Verbs(name="durable-beat", help=HELP)


def __getattr__(name: str) -> Any:
    """``EXIT_CODES`` and ``one_line`` come from ``commands.py``, imported on first use."""
    if name in ("EXIT_CODES", "one_line"):
        from celery_durable_beat.cli import commands

        return getattr(commands, name)
    raise AttributeError(f"module 'celery_durable_beat.cli' has no attribute {name!r}")
