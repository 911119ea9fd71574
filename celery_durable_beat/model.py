"""Frozen value objects and the one action vocabulary shared by every layer.

The enums below are the stable, low-cardinality words that appear in audit records, log lines
and metric labels alike; a test asserts on them, so renaming one is an API change.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from celery_durable_beat.schedules.spec import ScheduleSpec, spec_from_json, spec_to_json

DEFINITION_FORMAT = 1
"""Version of the JSON layout of a stored definition; bumped with a migration when it changes."""


class MissedPolicy(str, Enum):
    SKIP = "skip"
    RUN_ONCE = "run_once"
    BACKFILL = "backfill"


class OverlapPolicy(str, Enum):
    ALLOW = "allow"
    SKIP = "skip"
    REPLACE = "replace"


class ScheduleState(str, Enum):
    ACTIVE = "active"
    PAUSED = "paused"
    ARCHIVED = "archived"
    QUARANTINED = "quarantined"


class Source(str, Enum):
    CONFIG = "config"
    API = "api"


class Trigger(str, Enum):
    AUTO = "auto"
    MANUAL = "manual"


class Outcome(str, Enum):
    ENQUEUED = "enqueued"
    DEDUPLICATED = "deduplicated"
    FAILED = "failed"
    SKIPPED = "skipped"


class Reason(str, Enum):
    """Why a tick was not simply enqueued; never raw error text."""

    MISSED = "missed"
    TOO_LATE = "too_late"
    OVERLAP = "overlap"
    QUARANTINED = "quarantined"
    ALREADY_ENQUEUED = "already_enqueued"
    BROKER_UNAVAILABLE = "broker_unavailable"
    PUBLISH_ERROR = "publish_error"
    SERIALIZATION_ERROR = "serialization_error"
    ROUTING_ERROR = "routing_error"
    UNKNOWN_TASK = "unknown_task"


OWN_FAULT_REASONS = frozenset(
    {Reason.SERIALIZATION_ERROR, Reason.ROUTING_ERROR, Reason.UNKNOWN_TASK}
)
"""Failures caused by the schedule itself; K of them in a row quarantine it."""


class Action(str, Enum):
    """The ``action`` key of every structured log line beat writes."""

    ROUND = "round"
    PUBLISH_FAILED = "publish_failed"
    QUARANTINED = "quarantined"
    SYNC = "config_sync"
    LEADERSHIP_GAINED = "leadership_gained"
    LEADERSHIP_LOST = "leadership_lost"
    STANDBY = "standby"
    STORE_UNAVAILABLE = "store_unavailable"
    ADVANCE_CONFLICT = "advance_conflict"
    DUPLICATE_REFUSED = "duplicate_refused"
    DEDUP_UNAVAILABLE = "dedup_unavailable"
    RUN_TRACKING_UNAVAILABLE = "run_tracking_unavailable"
    RUN_TRACKING_RESTORED = "run_tracking_restored"
    OVERLAP_SKIPPED = "overlap_skipped"
    OVERLAP_REPLACED = "overlap_replaced"
    GUARD_INSTALLED = "guard_installed"
    """The worker put the dedup guard first on tasks whose class did not run it first."""
    REVOKE_FAILED = "revoke_failed"
    """A run ``replace`` displaced could not be marked revoked or its revoke not broadcast."""


@dataclass(frozen=True)
class Definition:
    """What a schedule is: everything config or the API says about it, validated."""

    name: str
    task: str
    spec: ScheduleSpec
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    missed: MissedPolicy = MissedPolicy.SKIP
    backfill_max: int = 10
    max_lateness: float | None = None
    overlap: OverlapPolicy = OverlapPolicy.ALLOW
    jitter: float = 0.0
    enabled: bool = True
    description: str | None = None

    @property
    def tz(self) -> str:
        return self.spec.tz

    def to_json(self) -> dict[str, Any]:
        """The versioned JSON stored for this definition (the name lives in its own column)."""
        return {
            "format": DEFINITION_FORMAT,
            "task": self.task,
            "schedule": spec_to_json(self.spec),
            "args": list(self.args),
            "kwargs": dict(self.kwargs),
            "options": dict(self.options),
            "missed": self.missed.value,
            "backfill_max": self.backfill_max,
            "max_lateness": self.max_lateness,
            "overlap": self.overlap.value,
            "jitter": self.jitter,
            "enabled": self.enabled,
            "description": self.description,
        }

    def definition_hash(self) -> str:
        """SHA-256 of the canonical JSON: equal hashes mean nothing about the schedule changed."""
        canonical = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    @classmethod
    def from_json(cls, name: str, data: Mapping[str, Any]) -> Definition:
        fmt = data.get("format")
        if fmt != DEFINITION_FORMAT:
            raise ValueError(f"definition of {name!r} has format {fmt!r}; expected 1")
        return cls(
            name=name,
            task=data["task"],
            spec=spec_from_json(data["schedule"]),
            args=tuple(data["args"]),
            kwargs=dict(data["kwargs"]),
            options=dict(data["options"]),
            missed=MissedPolicy(data["missed"]),
            backfill_max=int(data["backfill_max"]),
            max_lateness=data["max_lateness"],
            overlap=OverlapPolicy(data["overlap"]),
            jitter=float(data["jitter"]),
            enabled=bool(data["enabled"]),
            description=data["description"],
        )
