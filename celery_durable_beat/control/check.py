"""``check``: would beat accept this app's config? Answered without touching the store (SPEC §8).

The same validation beat runs at start (``Settings.from_conf`` for the ``durable_beat_*``
settings, ``celery_config.definitions_from_app`` for ``beat_schedule``), so a CI or deploy
pipeline can refuse a config change before any beat refuses it. Both halves are always run, so
one invalid setting does not hide a broken entry.

It also gives the read verbs settings to answer with on an invalid config: every valid setting as
configured, each invalid one at its default, so ``list`` still reads the configured store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from celery_durable_beat.celery_config import (
    STOCK_SCHEDULE_FILE,
    cron_deadline,
    definitions_from_app,
    host_zone,
)
from celery_durable_beat.exceptions import ConfigError, ConfigProblem
from celery_durable_beat.redis_client import is_redis_url
from celery_durable_beat.settings import PREFIX, SETTING_NAMES, Settings


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
        }


def check_config(app: Any) -> ConfigCheck:
    """Validate ``app.conf``'s ``durable_beat_*`` settings and ``beat_schedule``; no I/O."""
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
    return ConfigCheck(schedules, tuple(problems), settings, recommend(app, settings))


REDELIVERY_ADVICE = (
    "durable_beat_redeliver_after is unset and the broker is Redis: a tick recorded enqueued "
    "is lost for good if a worker is SIGKILLed inside kombu's BRPOP/unacked window, the Redis "
    "broker restarts without persistence or a queue is deleted; set it (e.g. "
    "durable_beat_redeliver_after = 60, with install(app) on the workers) so beat sends such "
    "ticks again (docs/high-availability.md)"
)


def recommend(app: Any, settings: Settings) -> tuple[str, ...]:
    """What ``check`` advises for this app (no I/O: the broker is judged by its URL), the stock
    beat settings read differently here included (SPEC §14)."""
    advice: list[str] = []
    if settings.redeliver_after is None and _redis_broker(app):
        advice.append(REDELIVERY_ADVICE)
    if not app.conf.get("timezone") and app.conf.get("enable_utc") is False:
        zone = host_zone()
        advice.append(
            f"enable_utc = False without timezone: crontabs are read in this host's zone, "
            f"{zone}, as stock beat reads them; set timezone = {zone!r} so every host reads "
            "them alike"
        )
    shelf = app.conf.get("beat_schedule_filename")
    if shelf and str(shelf) != STOCK_SCHEDULE_FILE:
        advice.append(
            f"beat_schedule_filename = {shelf!r} is ignored: durable beat keeps its schedules in "
            "durable_beat_url; remove it (and -s from beat's command line)"
        )
    loop = app.conf.get("beat_max_loop_interval")
    if loop and not 0 < loop < settings.poll_interval:
        advice.append(
            f"beat_max_loop_interval = {loop:g} has no effect: beat sleeps at most "
            f"durable_beat_poll_interval ({settings.poll_interval:g} s) between rounds; a value "
            "below it shortens the sleep"
        )
    deadline = cron_deadline(app)
    if deadline is not None:
        advice.append(
            f"beat_cron_starting_deadline = {deadline:g} is read as max_lateness = {deadline:g} "
            "for every cron entry that sets none: an occurrence dispatched later is skipped "
            "(reason too_late), as stock beat skips it"
        )
    return tuple(advice)


def _redis_broker(app: Any) -> bool:
    url = app.conf.get("broker_url") or ""
    first = url[0] if isinstance(url, (list, tuple)) and url else url
    return isinstance(first, str) and is_redis_url(first.split(";")[0])


def lenient_settings(conf: Any) -> Settings:
    """The settings with each one that fails validation on its own left at its default."""
    valid: dict[str, Any] = {}
    for name in SETTING_NAMES:
        key = PREFIX + name
        value = conf.get(key)
        if value is None:
            continue
        try:
            Settings.from_conf({key: value})
        except ConfigError:
            continue
        valid[key] = value
    try:
        return Settings.from_conf(valid)
    except ConfigError:  # settings that are only invalid together: fall back to the defaults
        return Settings.from_conf({})
