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
from functools import cached_property
from typing import Any

from celery_durable_beat.schedules.render import has_placeholders
from celery_durable_beat.schedules.spec import (
    AtSpec,
    ExcludedSpec,
    Exclusions,
    ScheduleSpec,
    Timeline,
    exclusions_from_json,
    spec_from_json,
    spec_to_json,
)

DEFINITION_FORMAT = 1
"""Version of the JSON layout of a stored definition; bumped with a migration when it changes."""


class MissedPolicy(str, Enum):
    """What fires when more than one occurrence of a schedule is due at once (SPEC §4)."""

    SKIP = "skip"
    """Only the latest due occurrence fires; the older ones are recorded as skipped."""
    RUN_ONCE = "run_once"
    """One catch-up for the earliest missed occurrence, then on from the next future one."""
    BACKFILL = "backfill"
    """The ``backfill_max`` most recent due occurrences fire, oldest first."""


class OverlapPolicy(str, Enum):
    """What a new tick does while the schedule's previous run is unfinished (SPEC §6)."""

    ALLOW = "allow"
    """Runs may overlap: the tick is published whatever the previous run is doing."""
    SKIP = "skip"
    """The tick is not published; it is recorded skipped with reason ``overlap``."""
    REPLACE = "replace"
    """The tick is published and the unfinished previous run is revoked once it is recorded."""
    BUFFER_ONE = "buffer_one"
    """At most one tick waits (durably) for the unfinished previous run and is published as
    soon as that run ends; further ticks meanwhile are skipped with reason ``overlap``."""


class ScheduleState(str, Enum):
    """Where a schedule stands; only ``active`` schedules are ever due."""

    ACTIVE = "active"
    """Dispatched when due."""
    PAUSED = "paused"
    """Stopped by an operator; resuming plans from now, with no replay of the pause."""
    ARCHIVED = "archived"
    """Gone from config (or archived by hand); kept, with its history, never dispatched."""
    QUARANTINED = "quarantined"
    """Failed for its own reasons too often, or cannot be read or planned; waits for a fix."""


class Source(str, Enum):
    """Who owns a schedule's definition, so config sync never overwrites the API's."""

    CONFIG = "config"
    """Declared in ``beat_schedule``; config sync creates, updates and archives it."""
    API = "api"
    """Created through DurableBeat, the CLI or an import; config sync never touches it."""


class Trigger(str, Enum):
    """Why a run was published: its schedule came due, or someone asked for it."""

    AUTO = "auto"
    """A planned occurrence, dispatched by the leader."""
    MANUAL = "manual"
    """A ``trigger`` call; it moves no next tick and skips the overlap and missed policies."""
    REDELIVER = "redeliver"
    """A tick recorded ``enqueued`` that the broker lost, published again with the same task id
    (``durable_beat_redeliver_after``, SPEC §6); its message is the tick's own (header ``auto``)."""
    BACKFILL = "backfill"
    """An operator's ``backfill`` of a past window (SPEC §15): an occurrence that was never
    enqueued, published under the id its automatic tick has or would have had."""


class OperatorAction(str, Enum):
    """What an operator did, as the action log records it (SPEC §15: ``actions``)."""

    PAUSE = "pause"
    """A schedule paused by an operator (``show`` names who: ``paused_by``)."""
    RESUME = "resume"
    """A paused or quarantined schedule resumed."""
    ARCHIVE = "archive"
    """A schedule retired, its history kept."""
    DELETE = "delete"
    """A schedule removed; its history and its action log stay."""
    UPSERT = "upsert"
    """An API schedule created or changed (an unchanged upsert records nothing)."""
    TRIGGER = "trigger"
    """A manual run that was published (a replayed idempotency key records nothing)."""
    BACKFILL = "backfill"
    """A backfill that published at least one occurrence."""
    IMPORT = "import"
    """A schedule created or changed by ``import`` (one row per schedule)."""


class Outcome(str, Enum):
    """What became of one tick, as its audit record says."""

    ENQUEUED = "enqueued"
    """Published and confirmed by the broker."""
    DEDUPLICATED = "deduplicated"
    """Already enqueued by an earlier round that did not advance; not published again."""
    FAILED = "failed"
    """The publish failed; the schedule stays on this tick and retries with backoff."""
    SKIPPED = "skipped"
    """Deliberately not published; the reason says why."""


class Reason(str, Enum):
    """Why a tick was not simply enqueued; never raw error text."""

    MISSED = "missed"
    """Dropped by the missed-run policy; one record states how many and the range."""
    TOO_LATE = "too_late"
    """Dispatched later than the schedule's ``max_lateness`` allows, so not fired."""
    OVERLAP = "overlap"
    """The previous run was unfinished and the overlap policy held this tick back."""
    QUARANTINED = "quarantined"
    """The schedule was quarantined at this tick."""
    REPLANNED = "replanned"
    """Config sync changed the definition while this tick was due; the re-plan dropped it."""
    ALREADY_ENQUEUED = "already_enqueued"
    """An ``enqueued`` record for this tick already exists (crash after audit)."""
    BROKER_UNAVAILABLE = "broker_unavailable"
    """The broker did not answer or did not confirm; never counts towards quarantine."""
    PUBLISH_ERROR = "publish_error"
    """The publish raised something not classified below."""
    SERIALIZATION_ERROR = "serialization_error"
    """The arguments cannot be serialised: the schedule's own fault."""
    ROUTING_ERROR = "routing_error"
    """The options name a queue the broker does not know: the schedule's own fault."""
    UNKNOWN_TASK = "unknown_task"
    """No worker knows the task: the schedule's own fault."""
    NO_WORKER = "no_worker"
    """``require_worker``: no live worker consumes the tick's queue, so it was not published."""
    FAILURES = "failures"
    """``pause_on_failure``: the last N runs failed, so the schedule was paused at this tick."""


class StateReason(str, Enum):
    """Why a schedule is not active (``state_reason`` in ``list`` and ``show``)."""

    OPERATOR = "operator"
    """Paused by ``pause`` (CLI, API or console)."""
    DISABLED = "disabled"
    """Declared with ``enabled: false``."""
    FAILURES = "failures"
    """Paused by ``pause_on_failure`` after N failed runs in a row; ``resume`` clears the count."""


EXPIRES_NEXT_TICK = "next_tick"
"""``expires`` value: a tick expires when its schedule's next tick is dispatched."""


OWN_FAULT_REASONS = frozenset(
    {Reason.SERIALIZATION_ERROR, Reason.ROUTING_ERROR, Reason.UNKNOWN_TASK}
)
"""Failures caused by the schedule itself; K of them in a row quarantine it."""


class Action(str, Enum):
    """The ``action`` key of every structured log line the package writes.

    A unit test holds every log call to one of these; ``docs/metrics.md`` lists them all (and a
    unit test keeps that list complete).
    """

    TICK_SENT = "tick_sent"
    """A tick was published and recorded ``enqueued``: stock beat's ``Scheduler: Sending due
    task`` line, or one line for a round of more than ``dispatch.SENT_LINES_MAX`` ticks."""
    PUBLISH_FAILED = "publish_failed"
    """A tick's publish failed; the record names the schedule, the task id and the reason."""
    PUBLISH_RAISED = "publish_raised"
    """Debug detail of a failed publish: the exception class behind the reason, never its text."""
    TEMPLATE_REFUSED = "template_refused"
    """Debug: ticks of one task and options keep going through ``send_task`` this round, since
    a message rendered from the captured template was not provably equal to it."""
    CONFIRM_FAILED = "confirm_failed"
    """The broker did not confirm a batch of buffered publishes; they are recorded failed."""
    QUARANTINED = "quarantined"
    """A schedule was quarantined: own-fault failures in a row, or unreadable or unplannable."""
    SYNC = "config_sync"
    """Config sync: its counts, or a config entry ignored because the API owns that name."""
    LEADERSHIP_GAINED = "leadership_gained"
    """This beat took the lease and leads from now on."""
    LEADERSHIP_LOST = "leadership_lost"
    """This beat stopped leading: lost, fenced out, or released at shutdown."""
    STANDBY = "standby"
    """This beat stands by; logged at start and whenever the leader changes."""
    STORE_UNAVAILABLE = "store_unavailable"
    """A round or the start failed on the store; it retries."""
    LEASE_UNAVAILABLE = "lease_unavailable"
    """A round failed on the lease backend (not: another beat holds the lease); it retries."""
    BROKER_UNAVAILABLE = "broker_unavailable"
    """A round stopped on the broker: a publish or a confirm failed for want of it; it retries."""
    ADVANCE_CONFLICT = "advance_conflict"
    """A schedule changed during the round, so its advance was not applied."""
    DUPLICATE_REFUSED = "duplicate_refused"
    """A worker refused a second delivery of a tick that had already started."""
    DEDUP_UNAVAILABLE = "dedup_unavailable"
    """The dedup Redis does not answer a worker; ticks run without the dedup check meanwhile."""
    RUN_TRACKING_UNAVAILABLE = "run_tracking_unavailable"
    """The store does not answer a worker; tasks keep running, their run state kept aside."""
    RUN_TRACKING_RESTORED = "run_tracking_restored"
    """Run tracking or the dedup state answers again after an outage."""
    OVERLAP_SKIPPED = "overlap_skipped"
    """A tick was held back because the previous run of its schedule is unfinished."""
    OVERLAP_REPLACED = "overlap_replaced"
    """The unfinished previous run is revoked in favour of the new tick."""
    TICK_UNRECORDED = "tick_unrecorded"
    """A tick of an ``overlap`` schedule was published but its round failed before recording it
    ``enqueued``: the overlap gate counts it as the schedule's previous tick until it ends."""
    BEAT_STARTED = "beat_started"
    """Beat is set up: which store and lease it uses, under which holder name."""
    BEAT_REFUSED = "beat_refused"
    """Beat refuses to start or run: invalid config or an outdated schema (run ``migrate``)."""
    ROUND_FAILED = "round_failed"
    """A round failed for a reason nobody foresaw; logged with its traceback, then backed off."""
    LEASE_RELEASE_FAILED = "lease_release_failed"
    """Giving the lease up failed (shutdown or fencing); it expires by itself after its TTL."""
    REQUEST_FAILED = "request_failed"
    """``serve`` failed to answer a request for a reason nobody foresaw: logged with its
    traceback, the client answered 500 in the error shape (``web/limits.py``)."""
    GUARD_INSTALLED = "guard_installed"
    """The worker put the dedup guard first on tasks whose class did not run it first."""
    SHUTDOWN_JOBS_KEPT = "shutdown_jobs_kept"
    """A warm shutdown kept the jobs pool processes already held, which Celery would drop
    (``worker/shutdown.py``); debug when this Celery is not one the remedy was verified on."""
    UNKNOWN_TASK = "unknown_task"
    """A worker received a tick whose task it does not have; recorded ``unknown_task``."""
    REQUEUED_FOR_CLAIM = "requeued_for_claim"
    """A redelivered tick met a claim still held and gave its message back to the broker rather
    than wait into its time limit (``worker/guard.py``): a later delivery runs it."""
    TIME_LIMIT = "time_limit"
    """A tick hit its hard time limit: the worker's main process recorded it ``failed``, even
    when the pool process was killed before the run claimed the tick."""
    REVOKE_FAILED = "revoke_failed"
    """A run ``replace`` displaced could not be marked revoked or its revoke not broadcast."""
    METRICS_SERVING = "metrics_serving"
    """Beat serves Prometheus ``/metrics`` on ``durable_beat_metrics_port``."""
    PAUSED_ON_FAILURE = "paused_on_failure"
    """``pause_on_failure`` paused a schedule: its last N runs failed."""
    METRICS_FAILED = "metrics_failed"
    """Metrics could not be updated (e.g. the store did not answer their read); beat goes on."""
    LOOP_STALLED = "loop_stalled"
    """Beat's ``/healthz`` turned 503: its loop has not turned within ``durable_beat_liveness_s``
    (``stalled`` True, a warning), or answers 200 again (``stalled`` False, info); once each."""
    REDELIVERED = "redelivered"
    """A lost tick (unclaimed, with evidence of loss) was published again with its task id."""
    REDELIVERY_GAVE_UP = "redelivery_gave_up"
    """A lost tick is not sent again: ``durable_beat_redeliver_max`` reached, or its schedule
    is gone or changed since the tick was published."""
    REDELIVERY_PROBE_FAILED = "redelivery_probe_failed"
    """The broker could not be asked whether a tick's message is still there (logged once per
    outage); no tick is redelivered on the broker's evidence meanwhile."""
    HOOK_FAILED = "hook_failed"
    """A receiver of ``signals.tick_enqueued`` or ``tick_skipped`` raised; logged with its
    traceback (then counted, once per round), and the other receivers and the round go on."""


def canonical_hash(canonical_json: str) -> str:
    """The definition hash of a ``Definition.canonical_json`` text (made once, used twice by
    config sync: a first start of 20,000 entries paid a tenth of its time making it twice)."""
    return hashlib.sha256(canonical_json.encode()).hexdigest()


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
    start_at_ms: int | None = None
    end_at_ms: int | None = None
    expires: float | str | None = None
    """Seconds after dispatch, or ``EXPIRES_NEXT_TICK``; None: the message never expires."""
    pause_on_failure: int | None = None
    require_worker: bool = False
    exclude: Exclusions | None = None
    """Dates without occurrences (SPEC §15); None for a schedule that excludes none."""

    @property
    def tz(self) -> str:
        return self.spec.tz

    @cached_property
    def has_placeholders(self) -> bool:
        """Whether any string in args or kwargs holds a placeholder: asked for every tick, so
        answered once (``renamed`` copies share the answer, as they share the values)."""
        return has_placeholders(self.args) or has_placeholders(self.kwargs)

    @property
    def timeline(self) -> Timeline:
        """What the planner walks: the spec, wrapped with its exclusion dates when it has any.

        Only a definition with ``exclude`` is wrapped, so the others keep the engine's fast
        paths (interval arithmetic, the cron walk) untouched.
        """
        if self.exclude is None or isinstance(self.spec, AtSpec):
            return self.spec
        return ExcludedSpec(self.spec, self.exclude)

    def to_json(self) -> dict[str, Any]:
        """The versioned JSON stored for this definition (the name lives in its own column).

        The bounded-schedule keys are written only when set: a definition that uses none of
        them keeps the JSON, and so the hash, it had before they existed, so upgrading never
        makes config sync re-plan an unchanged schedule.
        """
        optional = {
            "start_at_ms": self.start_at_ms,
            "end_at_ms": self.end_at_ms,
            "expires": self.expires,
            "pause_on_failure": self.pause_on_failure,
            "require_worker": self.require_worker or None,
            "exclude": None
            if self.exclude is None
            else {"tz": self.exclude.tz, "dates": self.exclude.to_json()},
        }
        return {
            **self._base_json(),
            **{key: value for key, value in optional.items() if value is not None},
        }

    def _base_json(self) -> dict[str, Any]:
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
        return canonical_hash(self.canonical_json())

    def canonical_json(self) -> str:
        """``to_json`` as compact JSON text with sorted keys: what the hash is of."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    def renamed(self, name: str) -> Definition:
        """This definition under another name: the stored JSON does not hold the name, so two
        schedules with the same JSON differ in nothing else. A shallow copy of the validated
        fields rather than ``dataclasses.replace``, which validates and copies all 18 again
        (the round's definition cache, ``store/sql/round.py``, calls this once per row)."""
        clone = object.__new__(Definition)
        clone.__dict__.update(self.__dict__)
        clone.__dict__["name"] = name
        return clone

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
            start_at_ms=data.get("start_at_ms"),
            end_at_ms=data.get("end_at_ms"),
            expires=data.get("expires"),
            pause_on_failure=data.get("pause_on_failure"),
            require_worker=bool(data.get("require_worker", False)),
            exclude=None if data.get("exclude") is None else exclusions_from_json(data["exclude"]),
        )
