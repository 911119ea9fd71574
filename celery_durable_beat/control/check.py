"""``check``: would beat accept this app's config? Answered without touching the store (SPEC §8).

The same validation beat runs at start (``Settings.from_conf`` for the ``durable_beat_*``
settings, ``celery_config.definitions_from_app`` for ``beat_schedule``), so a CI or deploy
pipeline can refuse a config change before any beat refuses it. Both halves are always run, so
one invalid setting does not hide a broken entry.

It also gives the read verbs settings to answer with on an invalid config: every valid setting as
configured, each invalid one at its default, so ``list`` still reads the configured store.

Every setting is named as the user wrote it (``CELERY_DURABLE_BEAT_REDELIVER_AFTER`` in Django
settings, ``Settings.names``), and the verdict carries the zone in force with where it came
from (``zone: America/New_York (Django TIME_ZONE)``, SPEC §16).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from celery_durable_beat.celery_config import (
    STOCK_SCHEDULE_FILE,
    UTC_DEFAULT,
    AppZone,
    cron_deadline,
    definitions_from_app,
    load_app_modules,
    zone_in_force,
)
from celery_durable_beat.exceptions import ConfigError, ConfigProblem
from celery_durable_beat.redis_client import is_redis_url
from celery_durable_beat.setting_names import written_name
from celery_durable_beat.settings import Settings, read_conf


@dataclass(frozen=True)
class ConfigCheck:
    """The verdict on an app's config: the schedules that validated, or every problem."""

    schedules: int
    problems: tuple[ConfigProblem, ...]
    settings: Settings
    """The settings to operate with: invalid ones replaced by their defaults."""
    recommendations: tuple[str, ...] = ()
    """Advice that does not stop beat (``check`` prints it on stderr, exit 0): e.g. turning
    redelivery on where the broker can lose recorded ticks."""
    zone: AppZone = UTC_DEFAULT
    """The zone schedules without their own ``tz`` are read in, and its source."""

    @property
    def ok(self) -> bool:
        return not self.problems

    def error(self) -> ConfigError:
        """The problems as the one ``ConfigError`` beat would refuse to start with."""
        return ConfigError(self.problems)

    def to_json(self) -> dict[str, Any]:
        problems = [{"entry": p.entry, "field": p.field, "problem": str(p)} for p in self.problems]
        return {
            "ok": self.ok,
            "schedules": self.schedules,
            "problems": problems,
            "recommendations": list(self.recommendations),
            "zone": {"name": self.zone.name, "source": self.zone.source},
            "namespace": self.settings.namespace,
        }


def check_config(app: Any) -> ConfigCheck:
    """Validate ``app.conf``'s ``durable_beat_*`` settings and ``beat_schedule``; no I/O.

    The app's modules are loaded first, as beat loads them at start (``load_app_modules``:
    on a Django project, ``django.setup()``), so what is validated is what beat would see.
    """
    load_app_modules(app)
    problems: list[ConfigProblem] = []
    try:
        settings = Settings.from_conf(app.conf)
    except ConfigError as exc:
        problems.extend(exc.problems)
        settings = lenient_settings(app.conf)
    schedules = 0
    try:
        schedules = len(definitions_from_app(app, settings))
    except ConfigError as exc:
        problems.extend(exc.problems)
    advice = recommend(app, settings)
    return ConfigCheck(schedules, tuple(problems), settings, advice, zone_in_force(app))


REDELIVERY_TEMPLATE = (
    "{name} is unset and the broker is Redis: a tick recorded enqueued is lost for good if a "
    "worker is SIGKILLed inside kombu's BRPOP/unacked window, the Redis broker restarts "
    "without persistence or a queue is deleted; set it (e.g. {name} = 60, with install(app) "
    "on the workers) so beat sends such ticks again (docs/high-availability.md)"
)
"""Formatted with ``name``: ``durable_beat_redeliver_after`` as the user writes it."""
REDELIVERY_ADVICE = REDELIVERY_TEMPLATE.format(name="durable_beat_redeliver_after")
"""The advice in the docs' spelling (an app without a namespace)."""


def recommend(app: Any, settings: Settings) -> tuple[str, ...]:
    """What ``check`` advises for this app (no I/O: the broker is judged by its URL), the stock
    beat settings read differently here included (SPEC §14)."""
    advice: list[str] = []
    conf, names = app.conf, settings.names
    if settings.redeliver_after is None and _redis_broker(app):
        advice.append(REDELIVERY_TEMPLATE.format(name=names.of("redeliver_after")))
    zone = zone_in_force(app)
    if zone.host:
        utc, timezone = written_name(conf, "enable_utc"), written_name(conf, "timezone")
        advice.append(
            f"{utc} = False without {timezone}: crontabs are read in this host's zone, "
            f"{zone.name}, as stock beat reads them; set {timezone} = {zone.name!r} so every "
            "host reads them alike"
        )
    shelf = conf.get("beat_schedule_filename")
    if shelf and str(shelf) != STOCK_SCHEDULE_FILE:
        advice.append(
            f"{written_name(conf, 'beat_schedule_filename')} = {shelf!r} is ignored: durable "
            f"beat keeps its schedules in {names.of('url')}; remove it (and -s from beat's "
            "command line)"
        )
    loop = conf.get("beat_max_loop_interval")
    if loop and not 0 < loop < settings.poll_interval:
        advice.append(
            f"{written_name(conf, 'beat_max_loop_interval')} = {loop:g} has no effect: beat "
            f"sleeps at most {names.of('poll_interval')} ({settings.poll_interval:g} s) between "
            "rounds; a value below it shortens the sleep"
        )
    deadline = cron_deadline(app)
    if deadline is not None:
        advice.append(
            f"{written_name(conf, 'beat_cron_starting_deadline')} = {deadline:g} is read as "
            f"max_lateness = {deadline:g} "
            "for every cron entry that sets none: an occurrence dispatched later is skipped "
            "(reason too_late), as stock beat skips it"
        )
    return tuple(advice)


def _redis_broker(app: Any) -> bool:
    url = app.conf.get("broker_url") or ""
    first = url[0] if isinstance(url, (list, tuple)) and url else url
    return isinstance(first, str) and is_redis_url(first.split(";")[0])


def lenient_settings(conf: Any) -> Settings:
    """The settings with each one that fails validation on its own left at its default, named
    as written (so a later message about one still names the user's line)."""
    values, names = read_conf(conf)
    valid: dict[str, Any] = {}
    for name, value in values.items():
        try:
            Settings.named({name: value}, names)
        except ConfigError:
            continue
        valid[name] = value
    try:
        return Settings.named(valid, names)
    except ConfigError:  # settings that are only invalid together: fall back to the defaults
        return Settings.named({}, names)
