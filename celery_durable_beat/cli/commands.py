"""``celery -A proj durable-beat <verb>``: operate schedules from a shell (SPEC §8).

Celery finds this group through the ``celery.commands`` entry point and hands every verb the
loaded app as ``ctx.obj.app``. Each verb is a thin shell over :class:`DurableBeat`: parse the
options, call one method, print either aligned text (``cli/format.py``, imported as
``cli_format``) or the method's ``to_json()`` with ``--json``.

Failures an operator can cause or fix (an unknown name, a bad option, an unreachable store) end
with ONE line on stderr and a documented exit code, never a traceback; see ``EXIT_CODES``.
Every verb is defined in this module, ``serve`` (the HTTP server of §9) included: it imports
``web/`` only when it runs, so the other verbs work without the web extra and ``serve`` says
which package is missing. A verb defined elsewhere would attach with
``durable_beat.add_command(...)`` and inherit this error handling through :class:`VerbCommand`
and :func:`control`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, TypeVar

import click
from celery.bin.base import CeleryCommand

from celery_durable_beat.cli import HELP
from celery_durable_beat.cli import format as cli_format
from celery_durable_beat.control import ConfigCheck, DurableBeat, check_config
from celery_durable_beat.control.actors import local_actor
from celery_durable_beat.control.views import NextTick
from celery_durable_beat.exceptions import (
    ConfigError,
    DurableBeatError,
    ImportSourceError,
    InvalidArgument,
    PublishFailed,
    ScheduleConflict,
    ScheduleNotFound,
    StoreError,
)
from celery_durable_beat.importers import KINDS, import_schedules

EXIT_CODES = {
    "ok": 0,
    "error": 1,
    "invalid input": 2,
    "schedule not found": 3,
    "conflict": 4,
    "store unavailable": 5,
    "publish failed": 6,
    "import source unusable": 7,
}
"""Exit codes of every verb, by meaning (documented in docs/operations.md)."""

_BY_ERROR: tuple[tuple[type[Exception], int], ...] = (
    (ScheduleNotFound, EXIT_CODES["schedule not found"]),
    (InvalidArgument, EXIT_CODES["invalid input"]),
    (ConfigError, EXIT_CODES["invalid input"]),
    (ScheduleConflict, EXIT_CODES["conflict"]),
    (StoreError, EXIT_CODES["store unavailable"]),
    (PublishFailed, EXIT_CODES["publish failed"]),
    (ImportSourceError, EXIT_CODES["import source unusable"]),
)

F = TypeVar("F", bound=Callable[..., Any])


class CliError(click.ClickException):
    """A failure shown as one ``Error: …`` line on stderr with a chosen exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(" ".join(message.split()))
        self._exit_code = exit_code

    @property  # click declares exit_code a class variable; ours depends on the failure
    def exit_code(self) -> int:  # type: ignore[override]
        return self._exit_code


def one_line(exc: DurableBeatError) -> CliError:
    """Our exception as one line; a ConfigError's list of problems is joined with ``;``."""
    if isinstance(exc, ConfigError):
        head = str(exc).splitlines()[0]  # "2 invalid schedule settings"
        message = f"{head}: " + "; ".join(str(p) for p in exc.problems)
    else:
        message = str(exc) or type(exc).__name__
    code = next((c for kind, c in _BY_ERROR if isinstance(exc, kind)), EXIT_CODES["error"])
    return CliError(message, code)


class _OneLineErrors:
    """Turns click usage errors and our own errors into one stderr line with an exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)  # type: ignore[misc]
        except CliError:
            raise
        except click.UsageError as exc:
            raise CliError(exc.format_message(), EXIT_CODES["invalid input"]) from None
        except DurableBeatError as exc:
            raise one_line(exc) from None


class VerbCommand(_OneLineErrors, CeleryCommand):  # type: ignore[misc]
    """A ``durable-beat`` verb; option errors surface as one line too."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)  # type: ignore[no-any-return]
        except click.UsageError as exc:
            raise CliError(exc.format_message(), EXIT_CODES["invalid input"]) from None


class VerbGroup(_OneLineErrors, click.Group):
    """The ``durable-beat`` group: an unknown verb is one line as well."""


def control(ctx: click.Context) -> DurableBeat:
    """The control API for the app Celery loaded, closed when the command ends.

    An invalid config does not stop an operator from reading the store (that is when they need
    it most): the verb answers, with every invalid setting at its default, after a warning on
    stderr naming what beat would refuse. ``check_config`` first loads the app's modules as
    ``celery beat`` does (on a Django project: ``django.setup()``), so a ``django-db`` result
    backend can be read by every verb.
    """
    beat = ctx.meta.get("durable_beat")
    if beat is None:
        app = ctx.obj.app  # ctx.obj: Celery's CLIContext, with the -A app
        checked = check_config(app)
        if not checked.ok:
            warn_invalid(checked)
        beat = DurableBeat(app, settings=checked.settings, actor=local_actor("cli"))
        ctx.meta["durable_beat"] = beat
        ctx.call_on_close(beat.close)
    assert isinstance(beat, DurableBeat)
    return beat


def warn_invalid(checked: ConfigCheck) -> None:
    """One stderr line naming every bad entry, before the verb's own answer."""
    click.echo(
        f"warning: beat would refuse this config: {one_line(checked.error()).message}", err=True
    )


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))


def emit_lines(lines: Iterable[str]) -> None:
    for line in lines:
        click.echo(line)


def emit(as_json: bool, data: Callable[[], Any], text: Callable[[], Iterable[str]]) -> None:
    """Every verb's output: ``data()`` as JSON with ``--json`` (SPEC §8's shapes), else the
    lines of ``text()``. Both are callables so only the chosen form is built."""
    if as_json:
        emit_json(data())
    else:
        emit_lines(text())


def lookahead_options(func: F) -> F:
    """``--count`` and ``--after``, shared by ``show`` and ``next``."""
    func = click.option("--after", help="Look ahead from this ISO 8601 instant instead of now.")(
        func
    )
    count_help = "How many next ticks (1..100)."
    return click.option("--count", default=5, show_default=True, help=count_help)(func)


def reason_option(func: F) -> F:
    """``--reason``: why, recorded in the action log with this user and host (SPEC §15)."""
    return click.option(
        "--reason", help="Why (one line, at most 500 characters); shown by `actions`."
    )(func)


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(func)


def parse_after(value: str | None, option: str = "--after") -> datetime | None:
    """``--after`` (or ``option``): an aware ISO 8601 instant (``Z`` allowed)."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(
            f"{option} {value!r} is not an ISO 8601 instant; e.g. 2026-12-01T03:00:00Z"
        ) from None
    if parsed.tzinfo is None:
        raise InvalidArgument(f"{option} {value!r} has no offset; add one, e.g. Z or +01:00")
    return parsed


def parse_kwargs(value: str | None) -> dict[str, Any] | None:
    """``--kwargs``: a JSON object."""
    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise InvalidArgument(
            f'--kwargs is not valid JSON ({exc}); give an object, e.g. \'{{"day": "x"}}\''
        ) from None
    if not isinstance(parsed, dict):
        raise InvalidArgument(f"--kwargs must be a JSON object, not {type(parsed).__name__}")
    return parsed


# -- the group and its verbs ----------------------------------------------------------------
@click.group(name="durable-beat", cls=VerbGroup, help=HELP)
@click.pass_context
def durable_beat(ctx: click.Context) -> None:
    """The verbs below; ``cli/__init__.py`` registers this group with Celery (``HELP``)."""


@durable_beat.command(name="list", cls=VerbCommand)
@json_option
@click.pass_context
def list_(ctx: click.Context, as_json: bool) -> None:
    """Every schedule with its state, source, next tick and last outcome."""
    views = control(ctx).list()
    emit(as_json, lambda: [v.to_json() for v in views], lambda: cli_format.schedules_table(views))


@durable_beat.command(cls=VerbCommand)
@click.argument("name")
@lookahead_options
@json_option
@click.pass_context
def show(ctx: click.Context, name: str, count: int, after: str | None, as_json: bool) -> None:
    """One schedule: its settings, whether it is overdue, and the next ticks in its zone."""
    beat, after_at = control(ctx), parse_after(after)
    detail = beat.get(name, count=count, after=after_at)
    emit(
        as_json,
        detail.to_json,
        lambda: cli_format.schedule_detail(detail, beat.next_ticks(name, count, after=after_at)),
    )


@durable_beat.command(cls=VerbCommand)
@click.argument("name")
@click.option("--limit", default=30, show_default=True, help="Events per page (1..100).")
@click.option("--cursor", help="The cursor printed by the previous page.")
@json_option
@click.pass_context
def history(ctx: click.Context, name: str, limit: int, cursor: str | None, as_json: bool) -> None:
    """Audit records of a schedule, newest first (also after it was deleted)."""
    page = control(ctx).history(name, limit=limit, cursor=cursor)
    emit(as_json, page.to_json, lambda: cli_format.history_table(page))


@durable_beat.command(name="next", cls=VerbCommand)
@click.argument("name")
@lookahead_options
@json_option
@click.pass_context
def next_(ctx: click.Context, name: str, count: int, after: str | None, as_json: bool) -> None:
    """The next ticks in the schedule's zone, with the task id each will carry."""
    beat, after_at = control(ctx), parse_after(after)
    ticks = beat.next_ticks(name, count, after=after_at)
    emit(as_json, lambda: [t.to_json() for t in ticks], lambda: _next_text(beat, name, ticks))


def _next_text(beat: DurableBeat, name: str, ticks: list[NextTick]) -> list[str]:
    detail = beat.get(name, count=1)
    lines = cli_format.next_ticks_table(ticks, detail.tz, state=detail.state)
    if detail.overdue is not None:
        lines.insert(0, "overdue " + cli_format.overdue_text(detail.overdue, detail.missed))
    return lines


@durable_beat.command(cls=VerbCommand)
@click.argument("name")
@click.option("--kwargs", "kwargs_json", help="JSON object merged over the schedule's kwargs.")
@click.option("--idempotency-key", help="Runs once per key; repeating it sends nothing.")
@reason_option
@json_option
@click.pass_context
def trigger(
    ctx: click.Context,
    name: str,
    kwargs_json: str | None,
    idempotency_key: str | None,
    reason: str | None,
    as_json: bool,
) -> None:
    """Run the schedule's task now; its next tick does not move."""
    result = control(ctx).trigger(name, parse_kwargs(kwargs_json), idempotency_key, reason=reason)
    emit(as_json, result.to_json, lambda: [cli_format.trigger_line(name, result)])


def _state_verb(verb: str, past: str, method: Callable[..., Any], doc: str) -> None:
    @durable_beat.command(name=verb, cls=VerbCommand, help=doc)
    @click.argument("name")
    @reason_option
    @json_option
    @click.pass_context
    def command(ctx: click.Context, name: str, reason: str | None, as_json: bool) -> None:
        view = method(control(ctx), name, reason=reason)
        emit(as_json, view.to_json, lambda: [cli_format.state_line(past, view)])


_state_verb("pause", "paused", DurableBeat.pause, "Stop ticking until resumed.")
_state_verb(
    "resume",
    "resumed",
    DurableBeat.resume,
    "Tick again from the next occurrence after now (the paused window is not replayed).",
)
_state_verb(
    "archive",
    "archived",
    DurableBeat.archive,
    "Retire a schedule, keeping its history (a config schedule returns at the next sync "
    "while it is still in beat_schedule).",
)


@durable_beat.command(cls=VerbCommand)
@click.argument("name")
@click.option("--from", "start", required=True, help="First instant, ISO 8601 with offset.")
@click.option("--to", "end", required=True, help="Last instant (at most now), ISO 8601.")
@click.option("--dry-run", is_flag=True, help="List the ticks it would send; send nothing.")
@reason_option
@json_option
@click.pass_context
def backfill(
    ctx: click.Context,
    name: str,
    start: str,
    end: str,
    dry_run: bool,
    reason: str | None,
    as_json: bool,
) -> None:
    """Send every occurrence in [--from, --to] that was never enqueued, oldest first.

    Each goes out under the task id its automatic tick has or would have had (so a tick that
    ran never runs again), with trigger backfill; at most 1,000 per call. Running it twice
    sends nothing the second time.
    """
    beat = control(ctx)
    first, last = parse_after(start, "--from"), parse_after(end, "--to")
    assert first is not None and last is not None  # required options
    result = beat.backfill(name, first, last, dry_run=dry_run, reason=reason)
    emit(as_json, result.to_json, lambda: cli_format.backfill_lines(result))


@durable_beat.command(cls=VerbCommand)
@click.argument("name", required=False)
@click.option("--limit", default=30, show_default=True, help="Actions per page (1..100).")
@click.option("--cursor", help="The cursor printed by the previous page.")
@json_option
@click.pass_context
def actions(
    ctx: click.Context, name: str | None, limit: int, cursor: str | None, as_json: bool
) -> None:
    """Who did what and why, newest first: one schedule's (also after it was deleted) or all."""
    page = control(ctx).actions(name, limit=limit, cursor=cursor)
    emit(as_json, page.to_json, lambda: cli_format.actions_table(page))


@durable_beat.command(cls=VerbCommand)
@json_option
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Leader, fencing epoch, schedules by state and how many are due now."""
    view = control(ctx).status()
    emit(as_json, view.to_json, lambda: cli_format.status_lines(view))


@durable_beat.command(cls=VerbCommand)
@json_option
@click.pass_context
def check(ctx: click.Context, as_json: bool) -> None:
    """Validate beat_schedule and the durable_beat_* settings as beat would, without the store.

    Exit 2 with every problem on stderr, or print ``N schedules OK`` and the zone schedules
    without their own tz are read in, with its source (``zone: America/New_York (Django
    TIME_ZONE)``): run it in CI and before a deploy rolls out a config change.
    """
    checked = check_config(ctx.obj.app)
    if as_json:
        emit_json(checked.to_json())
    elif checked.ok:
        click.echo(f"{checked.schedules} schedules OK")
        click.echo(f"zone: {checked.zone}")
        if checked.settings.namespace is not None:  # SPEC §16: whose schedules these are
            click.echo(f"namespace: {checked.settings.namespace}")
    else:  # the form beat logs when it refuses: the count, then one problem a line
        click.echo(f"beat would refuse to start: {checked.error()}", err=True)
    for advice in [] if as_json else checked.recommendations:
        click.echo(f"recommended: {advice}", err=True)
    if not checked.ok:
        ctx.exit(EXIT_CODES["invalid input"])


@durable_beat.command(cls=VerbCommand)
@json_option
@click.pass_context
def migrate(ctx: click.Context, as_json: bool) -> None:
    """Create or upgrade the store's schema to this version's revision."""
    beat = control(ctx)
    revision = beat.migrate()
    emit(as_json, lambda: {"revision": revision}, lambda: [f"schema at revision {revision}"])


@durable_beat.command(name="import", cls=VerbCommand)
@click.option(
    "--from", "kind", required=True, type=click.Choice(KINDS), help="The scheduler to copy from."
)
@click.argument("source_url")
@click.option("--dry-run", is_flag=True, help="Say what would change; write nothing.")
@reason_option
@json_option
@click.pass_context
def import_(
    ctx: click.Context,
    kind: str,
    source_url: str,
    dry_run: bool,
    reason: str | None,
    as_json: bool,
) -> None:
    """Copy the schedules another scheduler stores into the store, as API schedules.

    One line per entry (created, updated, unchanged, refused: reason) and a total; the first
    tick of each is planned from now, so nothing is replayed. Running it again changes nothing.
    """
    report = import_schedules(control(ctx), kind, source_url, dry_run=dry_run, reason=reason)
    emit(as_json, report.to_json, report.text)


@durable_beat.command(cls=VerbCommand)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8088, show_default=True, type=int, help="Port to listen on.")
@click.option(
    "--forwarded-allow-ips",
    default=None,
    metavar="ADDRESSES",
    help="Comma-separated addresses (or *) of the reverse proxies whose X-Forwarded-Proto and "
    "X-Forwarded-For are believed: the console's cookie is then Secure behind an HTTPS proxy. "
    "Unset: no proxy header is believed.",
)
@click.pass_context
def serve(ctx: click.Context, host: str, port: int, forwarded_allow_ips: str | None) -> None:
    """Serve the HTTP API, the web console and /metrics (needs the web extra).

    It starts and stays up while the store does not answer (503 meanwhile, SPEC §9).
    """
    try:
        from celery_durable_beat.web.auth import BadTokens
        from celery_durable_beat.web.server import serve as run_server
    except ImportError as exc:
        raise CliError(
            f"serve needs the web extra ({exc.name} is missing): "
            "pip install 'celery_durable_beat[web]'",
            EXIT_CODES["error"],
        ) from None
    try:
        run_server(control(ctx), host, port, forwarded_allow_ips=forwarded_allow_ips)
    except BadTokens as exc:
        raise CliError(str(exc), EXIT_CODES["invalid input"]) from None
