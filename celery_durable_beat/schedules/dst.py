"""Where wall-clock time and real time disagree: the gap and the fold of a zone.

This module is the whole DST rule book of celery_durable_beat (SPEC §5). Cron fields are matched
on the *wall clock* of the schedule's zone (croniter, on naive local datetimes); every matching
wall time is then mapped to real instants here:

* **Normal** wall time: exactly one instant.
* **Gap** (spring forward: e.g. 02:30 on the day New York jumps from 02:00 to 03:00, or 02:15 on
  the day Lord Howe jumps from 02:00 to 02:30): the wall time never happens. A *fixed-time* entry
  (neither minute nor hour field starts with ``*``) fires once, at the first valid instant after
  the gap, i.e. the transition instant; several of its wall times inside one gap collapse into
  that one instant. A *wildcard* entry (``*`` or ``*/n`` in minute or hour) has no occurrence in
  the gap: those wall times simply did not exist.
* **Fold** (fall back: 01:00-02:00 happens twice in New York in November): a fixed-time entry
  fires once, at the first pass (``fold=0``). A wildcard entry runs through both passes, because
  the repeated hour is real time: every matching wall time of the first pass, then every one of
  the second pass (``fold=1``), in that order.

This is classic (Vixie) cron's behaviour for changes under three hours, made exact. Transition
instants are found by bisection on whole seconds between the two readings of the wall time, so
no private zoneinfo API is used and every search is bounded.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from enum import Enum
from functools import lru_cache
from zoneinfo import ZoneInfo

_UTC = timezone.utc
_EPOCH = datetime(1970, 1, 1, tzinfo=_UTC)


class WallKind(Enum):
    NORMAL = "normal"
    GAP = "gap"
    FOLD = "fold"


@lru_cache(maxsize=512)
def zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def classify(wall: datetime, tz: ZoneInfo) -> WallKind:
    """Whether a naive wall time happens once, never (gap) or twice (fold) in ``tz``."""
    first = wall.replace(tzinfo=tz, fold=0)
    second = wall.replace(tzinfo=tz, fold=1)
    if first.utcoffset() == second.utcoffset():
        return WallKind.NORMAL
    back = first.astimezone(_UTC).astimezone(tz).replace(tzinfo=None)
    return WallKind.FOLD if back == wall else WallKind.GAP


def instant_s(wall: datetime, tz: ZoneInfo, fold: int = 0) -> int:
    """Epoch seconds of a whole-second wall time read with ``fold``."""
    aware = wall.replace(tzinfo=tz, fold=fold)
    return int((aware - _EPOCH).total_seconds())


def wall_of(epoch_s: int, tz: ZoneInfo) -> tuple[datetime, int]:
    """The naive wall time and fold at an instant (whole seconds)."""
    local = datetime.fromtimestamp(epoch_s, tz)
    return local.replace(tzinfo=None), local.fold


def _offset_at(epoch_s: int, tz: ZoneInfo) -> timedelta | None:
    return datetime.fromtimestamp(epoch_s, tz).utcoffset()


def transition_near(wall: datetime, tz: ZoneInfo) -> int:
    """The instant (epoch s) of the offset change that makes ``wall`` a gap or a fold.

    The two readings of ``wall`` (fold 0 and 1) lie on either side of the transition; bisection
    between them takes at most ~20 steps for any real-world shift.
    """
    lo, hi = sorted((instant_s(wall, tz, 0), instant_s(wall, tz, 1)))
    before = _offset_at(lo, tz)
    # Invariant: offset(lo) == before, offset(hi) != before.
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _offset_at(mid, tz) == before:
            lo = mid
        else:
            hi = mid
    return hi


def fold_bounds(wall: datetime, tz: ZoneInfo) -> tuple[datetime, datetime]:
    """The repeated stretch of wall time around ``wall``: [start, end) as naive datetimes."""
    change = transition_near(wall, tz)
    start, _ = wall_of(change, tz)
    end_minus, _ = wall_of(change - 1, tz)
    return start, end_minus + timedelta(seconds=1)


def gap_end(wall: datetime, tz: ZoneInfo) -> tuple[int, datetime]:
    """The first valid instant after the gap holding ``wall``, and its wall time."""
    change = transition_near(wall, tz)
    return change, wall_of(change, tz)[0]
