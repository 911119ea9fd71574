"""The values of settings that are more than a number: token roles and specs, and the checks a
field runs before or after its type (``Settings``'s field metadata reads them; so does the
pydantic model built from those fields, ``settings_model``).

Apart from ``settings`` so that module keeps to the fields and how they are read; everything
here is re-exported there (``from celery_durable_beat.settings import Role`` keeps working).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Any

from celery_durable_beat.ids import NAMESPACE_PATTERN
from celery_durable_beat.redis_client import TRANSPORT_KEYS

ACTOR_NAME_PATTERN = r"^[^\x00-\x1f\x7f]+$"
"""A token's name: printable, for it is written in the action log (1 to 64 characters)."""


class Role(str, Enum):
    """What an API token may do; each role may do everything the ones before it may (§9)."""

    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return list(Role).index(self)


@dataclass(frozen=True)
class TokenSpec:
    """A token's role and the name its actions are recorded under (SPEC §15):
    ``{"role": "operator", "name": "alice"}``. A bare role string is named
    ``<role>-<first 6 hex of the token's SHA-256>`` instead (``web/auth.py``)."""

    role: Role
    name: str


def positive_seconds(value: Any) -> Any:
    """``redeliver_after``, before its type: a zero, negative or non-numeric delay would
    redeliver at once or never, so it is refused with what to write instead."""
    if value is None:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(
            "must be a number of seconds greater than 0 (e.g. 60); leave it unset to turn "
            "redelivery off"
        )
    return float(value)


def redelivery_count(value: Any) -> Any:
    """``redeliver_max``, before its type."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            "must be a whole number of redeliveries, 0 or more (default 3; 0 never sends a "
            "tick again)"
        )
    return value


def namespace_name(value: Any) -> Any:
    """``namespace``, before its type: it becomes part of task ids, Redis keys and store rows,
    so it is refused unless it is 1 to 40 of ``[a-z0-9_-]`` (SPEC §2)."""
    if value is None:
        return value
    if not isinstance(value, str) or re.fullmatch(NAMESPACE_PATTERN, value) is None:
        raise ValueError(
            "must be 1 to 40 characters of a-z, 0-9, _ and - (e.g. 'billing'); leave it unset "
            "for the default namespace"
        )
    return value


def known_transport_keys(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """``lease_transport_options``, after its type: a misspelt key would leave a sentinel lease
    without its master name or password and fail later, far from the cause: refused here,
    naming the keys read."""
    unknown = sorted(set(value or {}) - set(TRANSPORT_KEYS))
    if unknown:
        raise ValueError(f"unknown keys {unknown}; the lease reads {', '.join(TRANSPORT_KEYS)}")
    return value
