"""The exceptions celery_durable_beat raises.

Every error the package raises on purpose derives from one root, so callers can catch
``DurableBeatError`` and know it is ours::

    DurableBeatError
    ├── ConfigError                 one or more schedule definitions are invalid (carries the list)
    ├── OccurrenceSearchError       a bounded occurrence search ran out of steps
    ├── ScheduleNotFound            (also LookupError) no schedule by that name
    ├── ScheduleConflict            the schedule's source or state forbids the change asked for
    ├── PublishFailed               a manual run could not be sent to the broker (carries reason)
    ├── StoreError                  the store cannot be used
    │   ├── StoreUnavailable        the database does not answer (URL shown without password)
    │   ├── SchemaOutdated          the schema needs ``celery -A proj durable-beat migrate``
    │   └── StaleEpoch              a write carried a fencing epoch older than the newest seen
    ├── LeaseError                  the leader lease backend failed
    ├── ImportSourceError           ``import`` cannot read its source: it does not answer, or
    │                               holds none of the peer's tables or keys (URL without password)
    └── InvalidArgument             (also ValueError) a caller passed a value out of range
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class DurableBeatError(Exception):
    """Root of every error raised on purpose by celery_durable_beat."""


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with one field of one schedule entry, with the fix."""

    entry: str
    field: str
    problem: str

    def __str__(self) -> str:
        return f'schedule "{self.entry}": {self.problem}'


@dataclass(frozen=True)
class SettingProblem(ConfigProblem):
    """A bad app-wide setting (``durable_beat_*``, ``timezone``): named once, as the setting.

    Why a kind of its own: a setting is not a schedule, so it must not print as
    ``schedule "settings"`` nor be repeated against every entry that would inherit it.
    ``field`` is the setting's name and ``problem`` starts with it.
    """

    def __str__(self) -> str:
        return f"setting {self.problem}"


SHOWN_PROBLEMS = 50
"""Problems a ConfigError's message lists: a config generated with one mistake in a thousand
entries should not log a thousand lines; ``problems`` keeps them all."""


class ConfigError(DurableBeatError):
    """Invalid schedule definitions; every problem of one config is collected in ``problems``."""

    def __init__(self, problems: Sequence[ConfigProblem]) -> None:
        self.problems: tuple[ConfigProblem, ...] = tuple(problems)
        count = len(self.problems)
        lines = [f"{count} invalid schedule setting{'s' if count != 1 else ''}"]
        lines += [f"  - {p}" for p in self.problems[:SHOWN_PROBLEMS]]
        if count > SHOWN_PROBLEMS:
            lines.append(f"  ... and {count - SHOWN_PROBLEMS} more")
        super().__init__("\n".join(lines))


class OccurrenceSearchError(DurableBeatError):
    """A search for the next occurrence gave up after its step bound instead of looping."""


class ScheduleNotFound(DurableBeatError, LookupError):
    """No schedule has the given name."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f'no schedule named "{name}"; `celery -A proj durable-beat list` shows them'
        )

    def __str__(self) -> str:
        return str(self.args[0])


class ScheduleConflict(DurableBeatError):
    """The schedule exists, but its source or state forbids the change (e.g. an API upsert of a
    schedule declared in config); the message says what to do instead."""


class PublishFailed(DurableBeatError):
    """A manual run (or a backfill) could not be published; ``reason`` is the stable code
    (never error text)."""

    def __init__(self, name: str, reason: str, what: str = "manual run") -> None:
        self.name = name
        self.reason = reason
        super().__init__(f'{what} of "{name}" was not sent: {reason}')


class StoreError(DurableBeatError):
    """The schedule store cannot be used."""


class StoreUnavailable(StoreError):
    """The database did not answer; the message names the URL without its password."""


class SchemaOutdated(StoreError):
    """The database schema is older than this version of the package."""


class StaleEpoch(StoreError):
    """A write carried a fencing epoch older than the newest the store has seen."""


class LeaseError(DurableBeatError):
    """The leader lease backend failed (not: the lease is held by another beat)."""


class ImportSourceError(DurableBeatError):
    """The source of an ``import`` cannot be read as the peer named: it does not answer, or it
    holds none of that peer's tables or keys. Raised before anything is written."""


class InvalidArgument(DurableBeatError, ValueError):
    """A caller passed a value outside its documented range; ``field`` names the argument when
    one is to blame (e.g. ``cursor``), for answers that list problems by field (HTTP 422)."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field
