"""The Celery edge of config: ``beat_schedule`` entries, Celery schedule objects included.

``celery.schedules.crontab``, ``schedule`` and ``solar`` are translated into the plain values the
pure validator understands; any other schedule object is a custom class (SPEC §18), handed on whole
so that its ``next_after`` gives its ticks (or its lack is refused, naming the method). A
``crontab`` becomes cron fields that keep Celery's meaning: both day fields must match (SPEC §5),
which no cron string can say when both are restricted, so it travels as
:class:`~celery_durable_beat.schedules.spec.CronFields`.

Two more things are read here as Celery itself reads them, so a stock-beat user and a durable-beat
user of one project get the same instants (SPEC §14, §16): the app's zone (``zone_in_force``:
Celery's ``app.timezone`` rule, Django's ``TIME_ZONE`` included) and the app's modules
(``load_app_modules``: Celery's ``import_modules`` hook, which sets Django up before anything reads
a result backend that lives in Django's ORM).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass, replace
from typing import Any

from celery import Signature
from celery.backends.base import DisabledBackend
from celery.schedules import BaseSchedule, crontab, schedule, solar

from celery_durable_beat.exceptions import ConfigError, ConfigProblem, SettingProblem
from celery_durable_beat.ids import name_key
from celery_durable_beat.model import Definition
from celery_durable_beat.schedules.custom import CustomObject, custom_spec
from celery_durable_beat.schedules.errors import SpecError
from celery_durable_beat.schedules.spec import CronFields, CronSpec, DayRule, SolarFields
from celery_durable_beat.schedules.validate import (
    NAME_MAX,
    RELATIVE_REFUSED,
    EntryDefaults,
    validate_entries,
    zone_problem,
)
from celery_durable_beat.setting_names import Matched, matched, written_name
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
    """The zone and missed policy entries default to: the app's zone as Celery reads it
    (``zone_in_force``) and ``durable_beat_default_missed``."""
    return EntryDefaults(tz=zone_in_force(app).name, missed=settings.default_missed)


@dataclass(frozen=True)
class AppZone:
    """The zone schedules without a ``tz`` of their own are read in, and where it came from.

    ``str()`` is what ``check`` prints after ``zone:``, e.g.
    ``America/New_York (Django TIME_ZONE)``.
    """

    name: str
    source: str
    """``timezone`` or ``CELERY_TIMEZONE`` (the setting as written), ``Django TIME_ZONE``,
    ``host zone (enable_utc = False)`` or ``default`` (UTC: ``zone: UTC (default)``)."""
    setting: str | None = None
    """The setting that holds the zone, as written (``TIME_ZONE``); None for the host's zone
    and the default, which no setting names."""
    host: bool = False
    """Read off the host (``enable_utc`` off, no zone set): hosts in other zones differ."""

    def __str__(self) -> str:
        return f"{self.name} ({self.source})"


UTC_DEFAULT = AppZone("UTC", "default")
"""No zone set and ``enable_utc`` on (Celery's default): UTC."""


def zone_in_force(app: Any) -> AppZone:
    """The app's zone by Celery's own rule, which stock beat's crontabs are read in.

    Celery's ``Settings.timezone`` is the first of ``timezone`` and ``TIME_ZONE`` that is not
    None, each read through the app's namespace, so a Django project configured with
    ``config_from_object("django.conf:settings", namespace="CELERY")`` and no
    ``CELERY_TIMEZONE`` gets Django's ``TIME_ZONE``; ``app.timezone`` then falls back, when
    that is empty, to UTC, or to the host's zone with ``enable_utc`` off. Reading
    ``app.conf.timezone`` alone misses the Django half: "0 9 * * *" was planned at 09:00 UTC
    while stock beat fired at 09:00 New York.
    """
    conf = app.conf
    key, value = "timezone", conf.get("timezone")
    if value is None:
        key, value = "TIME_ZONE", conf.get("TIME_ZONE")
    if value:
        found = matched(conf, key)
        written = found.key if found is not None else key
        return AppZone(_zone_name(value), _zone_source(found, written), written)
    if conf.get("enable_utc", True):
        return UTC_DEFAULT
    source = f"host zone ({written_name(conf, 'enable_utc')} = False)"
    return AppZone(host_zone(), source, host=True)


def _zone_name(value: Any) -> str:
    """A zone setting's IANA name: Celery takes a string or a tzinfo (``ZoneInfo``'s ``key``,
    pytz's ``zone``); anything else is shown as it is and refused by ``timezone_problem``."""
    for attr in ("key", "zone"):
        name = getattr(value, attr, None)
        if isinstance(name, str) and name:
            return name
    return str(value)


def _zone_source(found: Matched | None, written: str) -> str:
    """``Django TIME_ZONE`` when the zone is Django's own setting, else the key as written."""
    holder = getattr(found, "holder", None)
    owner = type(getattr(holder, "obj", holder)).__module__
    if written == "TIME_ZONE" and owner.split(".")[0] == "django":
        return "Django TIME_ZONE"
    return written


def host_zone() -> str:
    """The host's IANA zone (``TZ``, else ``/etc/localtime``), through tzlocal, Celery's own
    dependency for the same question."""
    import tzlocal

    return str(tzlocal.get_localzone_name() or "UTC")


_MODULES_LOADED = "_durable_beat_modules_loaded"
"""Marks a Celery loader whose ``import_default_modules`` ran here (once per app)."""


def load_app_modules(app: Any) -> None:
    """Send Celery's ``import_modules`` and import the app's modules, as ``celery beat`` and
    ``celery worker`` do at start (``loader.init_worker``), and ``celery shell`` and ``report``.

    Why: on a Django project, Celery's Django fixup answers that signal with ``django.setup()``
    (``DjangoFixup.on_import_modules``). Without it, the first read of ``app.backend`` for
    django-celery-results' ``django-db`` imports Django models before the app registry is
    ready and fails with ``AppRegistryNotReady``: every CLI verb did. Called before the
    result backend is read outside beat and the worker (``default_entries``, manual runs,
    the CLI); skipped where the loader's worker init already ran it, and done once per app.
    """
    loader = getattr(app, "loader", None)
    if loader is None or getattr(loader, "worker_initialized", False):
        return
    if getattr(loader, _MODULES_LOADED, False):
        return
    loader.import_default_modules()
    setattr(loader, _MODULES_LOADED, True)


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
        name = written_name(app.conf, "beat_schedule")
        problem = f"{name} is not a dict but a {type(raw).__name__}; give name -> entry"
        raise ConfigError([SettingProblem("settings", name, problem)])
    translated: dict[str, Any] = {}
    in_force = zone_in_force(app)
    defaults = EntryDefaults(tz=in_force.name, missed=settings.default_missed)
    problems: list[ConfigProblem] = []
    zone = timezone_problem(in_force)
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


def register_custom_schedules(app: Any) -> None:
    """Make the custom schedule objects of ``beat_schedule`` known to this process (SPEC §18).

    Their ticks come from the objects themselves, which only the app's config holds; a process
    that reads stored schedules without validating the config (``serve``, the CLI's reads, beat
    with config sync off) registers them here. An entry that is not a valid custom schedule is
    left for ``check`` and config sync to refuse: reading is not the place to fail on it.
    """
    raw = app.conf.beat_schedule or {}
    if not isinstance(raw, Mapping):
        return
    for entry in raw.values():
        value = entry.get("schedule") if isinstance(entry, Mapping) else None
        if type(value) in (crontab, schedule, solar) or not (
            isinstance(value, BaseSchedule) or hasattr(value, "is_due")
        ):
            continue
        with suppress(SpecError):
            custom_spec(value, "UTC")


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
    load_app_modules(app)  # a backend in Django's ORM needs Django set up first
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


def timezone_problem(zone: AppZone) -> SettingProblem | None:
    """Why the app's zone is unusable as the entries' default zone, or None; named as the
    setting that holds it was written (``CELERY_TIMEZONE``, ``TIME_ZONE``)."""
    problem = zone_problem(zone.name)
    if problem is None:
        return None
    setting = zone.setting or "timezone"
    return SettingProblem("settings", setting, f"{setting} {problem.removeprefix('tz ')}")


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
    if type(value) is solar:
        return {**entry, "schedule": SolarFields(value.event, value.lat, value.lon)}
    if type(value) is crontab:  # a subclass may compute its own times: a custom class below
        return {**entry, "schedule": CronFields(crontab_fields(value), DayRule.BOTH)}
    if type(value) is schedule:
        if value.relative:
            raise ConfigError([ConfigProblem(name, "schedule", RELATIVE_REFUSED)])
        return {**entry, "schedule": value.run_every.total_seconds()}
    if isinstance(value, BaseSchedule) or hasattr(value, "is_due"):
        # SPEC §18: its ticks come from its own next_after(); one without it is refused
        # by parse_schedule, naming the method to add.
        return {**entry, "schedule": CustomObject(value)}
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
