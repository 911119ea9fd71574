"""Does Celery's own command line accept these commands? Run as a process of its own:

    python -m tests.support.cli_accepts < commands.json

stdin: a JSON list of argument lists, each what follows ``celery`` (``["-A", "proj", "beat",
...]``). Each is parsed by Celery's real click command (with the ``celery.commands`` plugins,
so ``durable-beat`` too) with ``--help`` appended: click rejects an unknown option or command
before ``--help`` exits, so a command that parses here is one ``celery`` accepts. stdout: a JSON
list with, per command, ``null`` (accepted) or the error. Also: the app each ``-A`` names, with
the settings read from the environment, and what every ``-S`` resolves to.

A process of its own because ``-A`` imports the app module (with its ``install(app)``) and the
environment decides its settings: neither may leak into the test process.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import sys
from typing import Any


def accepts(argv: list[str]) -> str | None:
    """None when Celery's command line accepts ``argv``, else click's message."""
    import click
    from celery.bin.celery import celery

    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = celery.main(args=[*argv, "--help"], prog_name="celery", standalone_mode=False)
    except click.ClickException as exc:
        return exc.format_message()
    except SystemExit as exc:  # the app module refused to load (e.g. a missing variable)
        return f"exit {exc.code}: {out.getvalue()[-500:]}"
    return None if code in (0, None) else f"exit {code}: {out.getvalue()[-500:]}"


def scheduler(argv: list[str]) -> str | None:
    """The class ``-S``/``--scheduler`` names, resolved as ``celery beat`` resolves it."""
    from celery.beat import Scheduler
    from celery.utils.imports import symbol_by_name

    names = [b for a, b in itertools.pairwise(argv) if a in ("-S", "--scheduler")]
    if not names:
        return None
    from importlib.metadata import entry_points

    aliases = {ep.name: ep.value for ep in entry_points(group="celery.beat_schedulers")}
    cls = symbol_by_name(names[0], aliases=aliases)
    assert issubclass(cls, Scheduler), cls
    return f"{cls.__module__}.{cls.__qualname__}"


def app_settings(argv: list[str]) -> dict[str, Any]:
    """The settings of the app ``-A`` names, as the environment made them."""
    from celery.utils.imports import symbol_by_name

    module = argv[argv.index("-A") + 1]
    app = symbol_by_name(f"{module}:app")
    conf = app.conf
    return {
        "broker_url": conf.broker_url,
        "durable_beat_url": conf.get("durable_beat_url"),
        "durable_beat_metrics_port": conf.get("durable_beat_metrics_port"),
        "durable_beat_flower_url": conf.get("durable_beat_flower_url"),
        "durable_beat_lease_url": conf.get("durable_beat_lease_url"),
        "timezone": conf.timezone,
        "schedules": sorted(conf.beat_schedule),
    }


def main() -> int:
    commands = json.load(sys.stdin)
    report = []
    for argv in commands:
        error = accepts(argv)
        accepted = error is None
        report.append(
            {
                "error": error,
                "scheduler": scheduler(argv) if accepted else None,
                "app": app_settings(argv) if accepted else None,
            }
        )
    json.dump(report, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
