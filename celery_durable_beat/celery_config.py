"""The Celery edge of config: ``beat_schedule`` entries, Celery schedule objects included.

``celery.schedules.crontab`` and ``celery.schedules.schedule`` are translated into the plain
values the pure validator understands; ``solar`` and custom schedule classes are refused with a
message that says what to use instead. A ``crontab`` becomes cron fields that keep Celery's
meaning: both day fields must match (SPEC §5), which no cron string can say when both are
restricted, so it travels as :class:`~celery_durable_beat.schedules.spec.CronFields`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from celery import Signature
from celery.backends.base import DisabledBackend
from celery.schedules import crontab, schedule, solar

from celery_durable_beat.exceptions import ConfigError, ConfigProblem, SettingProblem
from celery_durable_beat.ids import name_key
from celery_durable_beat.model import Definition
from celery_durable_beat.schedules.spec import CronFields, CronSpec, DayRule
from celery_durable_beat.schedules.validate import (
    NAME_MAX,
    RELATIVE_REFUSED,
    EntryDefaults,
    validate_entries,
    zone_problem,
)
from celery_durable_beat.settings import Settings

_CRONTAB_FIELDS = (
    "_orig_minute",
    "_orig_hour",
    "_orig_day_of_month",
    "_orig_month_of_year",
    "_orig_day_of_week",
)
BACKEND_CLEANUP = "celery.backend_cleanup"
"""The name (and task) of Celery's own result-cleanup entry."""


STOCK_SCHEDULE_FILE = "celerybeat-schedule"
"""Celery's default ``beat_schedule_filename``: what ``celery beat`` passes when no ``-s``."""


def app_defaults(app: Any, settings: Settings) -> EntryDefaults:
    """The zone and missed policy entries default to: ``app.conf.timezone``; without one, the
    host's local zone when ``enable_utc`` is off (as stock beat reads crontabs then), else UTC."""
    return EntryDefaults(tz=app_zone(app), missed=settings.default_missed)


def app_zone(app: Any) -> str:
    """The app's zone, as stock beat reads crontabs in it (SPEC §14)."""
    if app.conf.get("timezone"):
        return str(app.conf.get("timezone"))
    if app.conf.get("enable_utc") is False:
        return host_zone()
    return "UTC"


def host_zone() -> str:
    """The host's IANA zone (``TZ``, else ``/etc/localtime``), through tzlocal, Celery's own
    dependency for the same question."""
    import tzlocal

    return str(tzlocal.get_localzone_name() or "UTC")


def cron_deadline(app: Any) -> float | None:
    """``beat_cron_starting_deadline`` (seconds): stock beat skips a crontab occurrence later
    than that; here it is the ``max_lateness`` of every cron entry that sets none (SPEC §14)."""
    value = app.conf.get("beat_cron_starting_deadline")
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value > 0 else None


def _with_cron_deadline(definitions: list[Definition], deadline: float | None) -> list[Definition]:
    if deadline is None:
        return definitions
    return [
        replace(d, max_lateness=deadline)
        if isinstance(d.spec, CronSpec) and d.max_lateness is None
        else d
        for d in definitions
    ]


def definitions_from_app(app: Any, settings: Settings) -> list[Definition]:
    """Validate ``app.conf.beat_schedule``; one ConfigError lists every problem."""
    raw = app.conf.beat_schedule or {}
    if not isinstance(raw, Mapping):
        problem = f"beat_schedule is not a dict but a {type(raw).__name__}; give name -> entry"
        raise ConfigError([SettingProblem("settings", "beat_schedule", problem)])
    translated: dict[str, Any] = {}
    defaults = app_defaults(app, settings)
    problems: list[ConfigProblem] = []
    zone = timezone_problem(defaults.tz)
    if zone is not None:  # said once, as the setting, not against every entry inheriting it
        problems.append(zone)
        defaults = replace(defaults, tz="UTC")
    for name, entry in {**raw, **default_entries(app, raw)}.items():
        try:
            translated[stable_name(name, entry)] = translate_entry(name, entry)
        except ConfigError as exc:
            problems.extend(exc.problems)
    try:
        definitions = validate_entries(translated, defaults)
    except ConfigError as exc:
        problems.extend(exc.problems)
    if problems:
        raise ConfigError(problems)
    return _with_cron_deadline(definitions, cron_deadline(app))


def default_entries(app: Any, beat_schedule: Mapping[Any, Any]) -> dict[str, Any]:
    """The entries stock beat adds by itself (``Scheduler.install_default_entries``).

    ``celery.backend_cleanup``, daily at 04:00 in the app's zone, when ``result_expires`` is set
    and the result backend does not expire results itself (a database backend, say): without it
    a team switching from stock beat would silently stop cleaning results. Unlike stock beat,
    not for the disabled backend, which stores nothing to clean. An entry of that name in
    ``beat_schedule`` wins, as in stock beat.
    """
    names = {name_key(name) for name in beat_schedule if isinstance(name, str)}
    if name_key(BACKEND_CLEANUP) in names or not app.conf.result_expires:
        return {}
    backend = app.backend
    if backend.supports_autoexpire or isinstance(backend, DisabledBackend):
        return {}
    return {
        BACKEND_CLEANUP: {
            "task": BACKEND_CLEANUP,
            "schedule": crontab("0", "4", "*"),
            "options": {"expires": 12 * 3600},
            "description": "Celery's expired-results cleanup, added as stock beat adds it",
        }
    }


def timezone_problem(zone: str) -> SettingProblem | None:
    """Why ``app.conf.timezone`` is unusable as the entries' default zone, or None."""
    problem = zone_problem(zone)
    if problem is None:
        return None
    return SettingProblem("settings", "timezone", f"timezone {problem.removeprefix('tz ')}")


def stable_name(name: Any, entry: Any) -> Any:
    """The name of an entry ``add_periodic_task`` made without ``name=``: Celery names it
    ``repr(signature)``, which can pass ``NAME_MAX``; such a name is cut and ends in ``-`` and
    the first 8 hex digits of its SHA-1, stable while the signature is (SPEC §14). A name the
    user wrote is left as it is (and refused if too long)."""
    if not isinstance(name, str) or len(name) <= NAME_MAX or not isinstance(entry, Mapping):
        return name
    task, args, kwargs = entry.get("task"), entry.get("args") or (), entry.get("kwargs") or {}
    if not isinstance(task, str) or name != repr(Signature(task, tuple(args), dict(kwargs))):
        return name
    digest = hashlib.sha1(name.encode("utf-8"), usedforsecurity=False).hexdigest()[:8]
    return f"{name[: NAME_MAX - 9]}-{digest}"


def translate_entry(name: str, entry: Any) -> Any:
    """A copy of the entry whose Celery schedule object became cron fields or seconds."""
    if not isinstance(entry, Mapping) or "schedule" not in entry:
        return entry
    value = entry["schedule"]
    if isinstance(value, solar):
        raise ConfigError(
            [
                ConfigProblem(
                    name,
                    "schedule",
                    ("solar schedules are not supported; use a cron expression with a tz instead"),
                )
            ]
        )
    if type(value) is crontab:  # a subclass may compute its own times: refused below
        return {**entry, "schedule": CronFields(crontab_fields(value), DayRule.BOTH)}
    if type(value) is schedule:
        if value.relative:
            raise ConfigError([ConfigProblem(name, "schedule", RELATIVE_REFUSED)])
        return {**entry, "schedule": value.run_every.total_seconds()}
    if isinstance(value, (schedule, crontab)) or (
        hasattr(value, "is_due") and hasattr(value, "remaining_estimate")
    ):
        raise ConfigError(
            [
                ConfigProblem(
                    name,
                    "schedule",
                    (
                        f"{type(value).__name__} is a custom schedule class, which cannot be "
                        "stored; "
                        "use a cron string, '@every 30s', crontab() or schedule()"
                    ),
                )
            ]
        )
    return entry


def crontab_fields(value: crontab) -> tuple[str, ...]:
    """The 5 cron fields of a ``crontab``, exactly as the user wrote them."""
    return tuple(_field(getattr(value, attr)) for attr in _CRONTAB_FIELDS)


def _field(value: Any) -> str:
    if isinstance(value, str):
        return value.replace(" ", "")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Iterable):
        return ",".join(str(v) for v in sorted(value))
    return str(value)
