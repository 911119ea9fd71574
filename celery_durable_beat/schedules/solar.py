"""Solar schedules (SPEC §18): Celery's ``solar`` events, as deterministic tick instants.

A solar spec fires at one of Celery's nine events (:data:`SOLAR_EVENTS`) at one place. Each
instant is the event as PyEphem computes it with Celery's own settings (the horizon, the search
method and ``use_center`` of ``celery.schedules.solar``, an ``Observer`` given the latitude and
longitude as strings, elevation 0, pressure 0), truncated down to the whole second. Celery is
not imported: the pure core must not depend on it, so the settings are copied in :data:`_RULES`.

**Why the search never starts at the instant asked about.** A tick's id is derived from its
instant (SPEC §4), so every process must compute the same instants whatever it asks from. PyEphem
refines an event iteratively to about 0.1 s, and where it lands depends on where the search
starts: the same sunset searched from two starts can differ by a few hundredths of a second,
which truncation turns into two different seconds whenever the event lies that close to a
whole second. So each event is searched only from fixed anchors, one per local mean solar day:

    anchor_k = k * 86400 s + phase - round(lon * 240) s        (k any integer, UTC epoch)

``round(lon * 240)`` seconds is how far local mean solar time (UTC + lon/15 h) runs ahead of
UTC, so ``anchor_k`` is the wall time ``phase`` of local mean solar time on day k. The phase is
chosen per event as far as possible from where the event can happen: a rising (the dawns,
sunrise) happens between solar midnight and solar noon, so its anchors are at 18:00; a setting
(sunset, the dusks) between noon and midnight, anchors at 06:00; solar noon near 12:00 (the
equation of time moves it by at most about 17 minutes), anchors at 00:00. The schedule's tick in
window k is then the first event PyEphem finds searching from ``anchor_k``, if that lies before
``anchor_{k+1}``, truncated down to the whole second; a window has at most one tick (one per
local solar day), and because each window is a whole turn of the sun placed hours away from
every possible event, no event of an ordinary day is lost or counted twice. Anchors are whole
seconds, so ticks of successive windows strictly increase even after truncation. The instants
are PyEphem's floats, so every process of one deployment must run the same PyEphem release.

**Days without the event.** In polar day or night some events do not happen (sunrise in the
polar night, astronomical dusk in a white night); PyEphem raises ``CircumpolarError`` and that
window has no tick. A search walks at most :data:`MAX_WINDOWS` windows, more than a year. Up
to :data:`POLE_LIMIT` degrees north or south PyEphem finds every event at least once a year, so
the walk always ends at a tick; closer to the pole its search misses whole seasons, so such a
spec is refused (solar noon excepted, found every day everywhere). A stored spec past the limit that
walks the whole bound raises :class:`~celery_durable_beat.exceptions.OccurrenceSearchError`,
which a round answers by quarantining the schedule, never by searching again at once. Ticks
exist in years 1900-9999 of UTC (SPEC §2): a search from before 1900 answers the first tick of
1900, and one from the last tick of year 9999 on answers None: the schedule has ended.

**Cost.** A PyEphem search takes about 60 µs, so a call costs about 65 µs when its window is
new and about 1 µs when it is not: each window's tick is a pure function of (event, latitude,
longitude, k), so it is cached (:func:`_window_tick`). A walk through Longyearbyen's polar night
(some 80 windows) takes about 5 ms once. The mutable PyEphem objects are kept per thread
(:class:`_Objects`), never shared.

PyEphem is the optional extra ``celery_durable_beat[solar]``, imported on first use:
:func:`parse_solar` and :func:`solar_spec` refuse a solar schedule without it, so config
validation reports it instead of a round failing.
"""

from __future__ import annotations

import difflib
import importlib
import math
import re
import threading
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache
from types import ModuleType
from typing import Any, NamedTuple

from celery_durable_beat.exceptions import OccurrenceSearchError
from celery_durable_beat.schedules.bounds import FIRST_MS, LAST_MS, show_number
from celery_durable_beat.schedules.errors import SpecError

SOLAR_EVENTS: tuple[str, ...] = (
    "dawn_astronomical",
    "dawn_nautical",
    "dawn_civil",
    "sunrise",
    "solar_noon",
    "sunset",
    "dusk_civil",
    "dusk_nautical",
    "dusk_astronomical",
)
"""Celery's solar events, in the order Celery's documentation lists them."""

EPHEM_MISSING = "solar schedules need PyEphem: pip install 'celery_durable_beat[solar]'"
EXAMPLE = "'@solar sunset 59.437 24.745'"

DAY_S = 86_400
MAX_WINDOWS = 400
"""Most windows (local solar days) one search walks before it gives up: more than a year, and
well past the longest absence of an event within :data:`POLE_LIMIT` (290 days, near the pole)."""

POLE_LIMIT = 89.5
"""The highest latitude, north or south, of every event but solar noon (which PyEphem finds
every day everywhere). Up to it PyEphem finds each event at least once a year, in every year
from 1900 to 9999, at most 290 days apart; beyond about 89.7 its search misses whole seasons
(at 89.9 there are years without a sunset), and at the pole itself it finds none."""

_DUBLIN_EPOCH_DAYS = 25_567.5
"""The Unix epoch as an ``ephem.Date``: days since 1899-12-31 12:00 UT."""
_LAST_S = LAST_MS // 1000
"""The last whole second of year 9999: a tick after it does not exist."""


class _Rule(NamedTuple):
    """How Celery's ``solar`` finds one event, and where this module anchors its windows."""

    horizon: str
    method: str
    use_center: bool
    phase_s: int
    """Local mean solar time of the window's start, in seconds after midnight."""
    words: str


_RISING, _SETTING, _NOON = 18 * 3600, 6 * 3600, 0
_RULES: dict[str, _Rule] = {
    "dawn_astronomical": _Rule("-18", "next_rising", True, _RISING, "astronomical dawn"),
    "dawn_nautical": _Rule("-12", "next_rising", True, _RISING, "nautical dawn"),
    "dawn_civil": _Rule("-6", "next_rising", True, _RISING, "civil dawn"),
    "sunrise": _Rule("-0:34", "next_rising", False, _RISING, "sunrise"),
    "solar_noon": _Rule("0", "next_transit", False, _NOON, "solar noon"),
    "sunset": _Rule("-0:34", "next_setting", False, _SETTING, "sunset"),
    "dusk_civil": _Rule("-6", "next_setting", True, _SETTING, "civil dusk"),
    "dusk_nautical": _Rule("-12", "next_setting", True, _SETTING, "nautical dusk"),
    "dusk_astronomical": _Rule("-18", "next_setting", True, _SETTING, "astronomical dusk"),
}
"""Celery's ``_horizons``, ``_methods`` and ``_use_center_l`` (celery/schedules.py, class
``solar``), one row per event, plus the phase of this module's anchors."""

_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
"""A decimal number as written in a schedule string (no ``nan``, ``inf`` or ``1_000``, which
``float()`` would also take)."""


@dataclass(frozen=True)
class SolarSpec:
    """One of Celery's solar events at one place: ``@solar sunset 59.437 24.745``.

    ``tz`` is only the zone the instants are shown in and ``exclude`` dates are read in: an
    event is an instant, the same in every zone, so it is never used to compute.
    """

    event: str
    lat: float
    lon: float
    tz: str = "UTC"

    def text(self) -> str:
        """The schedule string: ``parse_solar(spec.text(), spec.tz) == spec``."""
        return f"@solar {self.event} {_shortest(self.lat)} {_shortest(self.lon)}"


def _shortest(value: float) -> str:
    """The shortest text that reads back as ``value`` (``repr``), ``59`` rather than ``59.0``."""
    shown = repr(value)
    return shown[:-2] if shown.endswith(".0") else shown


def parse_solar(text: str, tz: str) -> SolarSpec:
    """Read a whole schedule string ``@solar <event> <lat> <lon>``; raises SpecError."""
    words = text.split()
    if len(words) != 4 or words[0] != "@solar":
        raise SpecError(
            f"{show_number(text)} needs an event, a latitude and a longitude, e.g. {EXAMPLE}"
        )
    _, event, lat, lon = words
    return solar_spec(event, _read_number("latitude", lat), _read_number("longitude", lon), tz)


def _read_number(field: str, word: str) -> float:
    if not _NUMBER.fullmatch(word):
        raise SpecError(f"{field} {show_number(word)} is not a number; {_HINTS[field]}")
    return float(word)


_HINTS = {
    "latitude": "give degrees north of the equator (south is negative), e.g. 59.437",
    "longitude": "give degrees east of Greenwich (west is negative), e.g. 24.745",
}


def solar_spec(event: object, lat: object, lon: object, tz: str) -> SolarSpec:
    """A checked spec from a Celery ``solar``'s (or an importer's) event and place.

    Raises SpecError naming what is wrong and the fix: an event Celery does not know, a
    latitude or longitude that is not a finite real number (a bool is refused, although Python
    counts it as an int) or out of range, or PyEphem missing.
    """
    if not isinstance(event, str) or event not in _RULES:
        raise SpecError(_event_problem(event))
    spec = SolarSpec(event, _degrees("latitude", lat, 90), _degrees("longitude", lon, 180), tz)
    if event != "solar_noon" and abs(spec.lat) > POLE_LIMIT:
        raise SpecError(
            f"latitude {_shortest(spec.lat)} is too close to the pole for {_RULES[event].words}: "
            f"beyond {POLE_LIMIT} degrees PyEphem does not find it every year; give a latitude "
            f"within -{POLE_LIMIT}..{POLE_LIMIT} (55 km from the pole) or use solar_noon"
        )
    _ephem()
    return spec


def _event_problem(event: object) -> str:
    guess = (
        difflib.get_close_matches(event.lower(), SOLAR_EVENTS, n=1)
        if isinstance(event, str)
        else []
    )
    shown = f'"{event}"' if isinstance(event, str) and len(event) <= 80 else show_number(event)
    return (
        f"event {shown} is not a solar event; use one of {', '.join(SOLAR_EVENTS)}, "
        f'e.g. "{guess[0] if guess else "sunset"}"'
    )


def _degrees(field: str, value: object, limit: int) -> float:
    """``value`` as a float in -limit..limit; Decimal and Fraction too (django-celery-beat
    stores coordinates as decimals). The range is checked before converting, so an int too
    large for a float is refused, not an OverflowError."""
    hint = _HINTS[field]
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal, Fraction)):
        raise SpecError(f"{field} {show_number(value)} is not a number; {hint}")
    if not _is_finite(value):
        raise SpecError(f"{field} {value} is not a finite number; {hint}")
    if not -limit <= value <= limit:
        raise SpecError(f"{field} {_shown(value)} is outside -{limit}..{limit}; {hint}")
    return float(value) + 0.0  # -0.0 becomes 0.0: one spec, one text, one definition


def _is_finite(value: float | Decimal | Fraction) -> bool:
    if isinstance(value, Decimal):
        return value.is_finite()
    return not isinstance(value, float) or math.isfinite(value)


def _shown(value: float | Decimal | Fraction) -> str:
    """A number for a message as the user would write it: ``91``, not ``91.0``."""
    if isinstance(value, float):
        return _shortest(value)
    if isinstance(value, int):
        return show_number(value)
    text = str(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def describe_solar(spec: SolarSpec) -> str:
    """``at sunset in 59.437, 24.745``. No zone is named: the instants do not depend on one."""
    rule = _RULES.get(spec.event)
    what = rule.words if rule is not None else spec.event
    return f"at {what} in {_shortest(spec.lat)}, {_shortest(spec.lon)}"


def next_solar_ms(spec: SolarSpec, after_ms: int) -> int | None:
    """The first tick strictly after ``after_ms`` (UTC epoch ms), a whole second in ms; None
    when there is none up to the end of year 9999.

    Walks the windows (see the module docstring) from the one holding ``after_ms``; raises
    OccurrenceSearchError after :data:`MAX_WINDOWS` windows without a tick, and SpecError when
    PyEphem is missing or the stored event is not one of :data:`SOLAR_EVENTS`.
    """
    rule = _RULES.get(spec.event)
    if rule is None:
        raise SpecError(_event_problem(spec.event))
    _ephem()
    after_s = max(after_ms, FIRST_MS - 1000) // 1000  # tick * 1000 > after_ms <=> tick > after_s
    offset_s = rule.phase_s - round(spec.lon * 240)
    first = (after_s - offset_s) // DAY_S
    for k in range(first, first + MAX_WINDOWS):
        if offset_s + k * DAY_S > _LAST_S:
            return None
        tick = _window_tick(spec.event, spec.lat, spec.lon, k)
        if tick is None or tick <= after_s:
            continue
        return tick * 1000 if tick <= _LAST_S else None
    raise OccurrenceSearchError(
        f"{spec.text()} found no {rule.words} in {MAX_WINDOWS} days: PyEphem finds none there"
    )


@lru_cache(maxsize=4096)
def _window_tick(event: str, lat: float, lon: float, k: int) -> int | None:
    """The tick of window k: the event PyEphem finds from ``anchor_k``, if before
    ``anchor_{k+1}``, in whole seconds; None for a window without one.

    A pure function of its arguments, cached: the round asks for the tick after the one it just
    fired, ``next`` for several in a row, and a walk through a polar night crosses the same
    windows again on every call until the sun returns.
    """
    rule = _RULES[event]
    start_s = rule.phase_s - round(lon * 240) + k * DAY_S
    observer, sun = _objects(event, lat, lon)
    options = {"use_center": True} if rule.use_center else {}
    try:
        found = getattr(observer, rule.method)(
            sun, start=_DUBLIN_EPOCH_DAYS + start_s / DAY_S, **options
        )
    except _ephem().CircumpolarError:  # polar day or night: no such event in this window
        return None
    found_s = (float(found) - _DUBLIN_EPOCH_DAYS) * DAY_S
    if not start_s <= found_s < start_s + DAY_S:
        return None
    return math.floor(found_s)


class _Objects(threading.local):
    """This thread's PyEphem observers and suns, by (event, lat, lon).

    PyEphem objects are mutable (a search moves the observer's date and recomputes the sun), so
    two threads must never share one; building them costs about 4 µs a search, which this saves.
    """

    LIMIT = 64

    def __init__(self) -> None:
        self.made: dict[tuple[str, float, float], tuple[Any, Any]] = {}


_OBJECTS = _Objects()


def _objects(event: str, lat: float, lon: float) -> tuple[Any, Any]:
    """An observer set up as Celery's ``solar`` sets up its own, and a sun, for this thread."""
    key = (event, lat, lon)
    made = _OBJECTS.made.get(key)
    if made is None:
        ephem = _ephem()
        observer = ephem.Observer()
        observer.lat = str(lat)  # a string is degrees (a float would be radians), as Celery
        observer.lon = str(lon)
        observer.elev = 0
        observer.horizon = _RULES[event].horizon
        observer.pressure = 0
        if len(_OBJECTS.made) >= _OBJECTS.LIMIT:
            _OBJECTS.made.clear()
        made = _OBJECTS.made[key] = (observer, ephem.Sun())
    return made


@lru_cache(maxsize=1)
def _ephem() -> ModuleType:
    """PyEphem, imported on first use (an optional extra); SpecError naming the extra when it
    is missing (not cached, so installing it into a running process is seen)."""
    try:
        return importlib.import_module("ephem")
    except ImportError:
        raise SpecError(EPHEM_MISSING) from None
