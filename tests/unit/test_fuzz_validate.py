"""Generated ``beat_schedule`` entries through validation and the pure read path (SPEC §2 Bounds).

Every drawn entry (``tests/support/entries.py``: every schedule form and extra key, values at and
beyond the bounds) goes through the one validation path, the Celery edge's ``translate_entry``
then ``validate_entry``. A refused entry is refused with ``ConfigError`` naming its problems,
never another exception. An accepted one must survive everything the read surfaces compute from
it without a store: the schedule in words, its bounds in words, the stored JSON and its hash,
the first tick and the next ones, each tick in its zone and its task id.

The default run is derandomized (the same 300 examples on every machine, no example database);
``-m slow`` draws 5,000 random ones. The count of drawn, accepted and refused entries is printed.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from celery_durable_beat.celery_config import translate_entry
from celery_durable_beat.exceptions import ConfigError
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.model import Definition
from celery_durable_beat.policy import first_tick_ms, ticks_after
from celery_durable_beat.schedules.describe import describe, describe_bounds
from celery_durable_beat.schedules.render import render, tick_isoformat
from celery_durable_beat.schedules.spec import spec_from_json, spec_to_json
from celery_durable_beat.schedules.validate import EntryDefaults, validate_entry
from tests.support.entries import count_cases

pytestmark = pytest.mark.unit

NOW_MS = 1_780_000_000_000  # 2026-05-28: "now" for the first tick and the next ones
DEFAULTS = EntryDefaults(tz="Europe/Berlin")


def validated(name: str, entry: object) -> Definition | None:
    """The definition, or None when validation refused the entry with problems."""
    try:
        return validate_entry(name, translate_entry(name, entry), DEFAULTS)
    except ConfigError as exc:
        problems = exc.problems
    assert problems, "a ConfigError without problems"
    for problem in problems:
        assert problem.field and problem.problem, problem
    return None


def read_everything(definition: Definition) -> None:
    """What ``list``, ``show``, ``next`` and the console compute from a definition alone."""
    name, tz = definition.name, definition.tz
    assert describe(definition.spec)
    describe_bounds(definition.start_at_ms, definition.end_at_ms, definition.expires, tz)
    assert spec_from_json(spec_to_json(definition.spec)) == definition.spec
    json.loads(definition.canonical_json())
    definition.definition_hash()
    first = first_tick_ms(definition, NOW_MS)
    for instant in (first, definition.start_at_ms, definition.end_at_ms):
        if instant is not None:
            tick_isoformat(instant, tz)
    for after in (NOW_MS, definition.start_at_ms, definition.end_at_ms):
        for tick in ticks_after(definition, NOW_MS if after is None else after, 5):
            tick_isoformat(tick, tz)
            tick_task_id(name, tick)
            render(list(definition.args), tick, tz)
            render(dict(definition.kwargs), tick, tz)


def accepted_and_read(name: str, entry: object) -> bool:
    definition = validated(name, entry)
    if definition is None:
        return False
    read_everything(definition)
    return True


def report(capsys: pytest.CaptureFixture[str], what: str, counts: Counter[str]) -> None:
    with capsys.disabled():
        print(f"\n{what}: {dict(counts)}")


def test_what_validation_accepts_is_described_and_planned_without_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    counts = count_cases(accepted_and_read, max_examples=300, derandomize=True)
    report(capsys, "validate (derandomized)", counts)
    assert counts["accepted"] and counts["refused"]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_what_validation_accepts_is_described_and_planned_without_error_long(
    capsys: pytest.CaptureFixture[str],
) -> None:
    counts = count_cases(accepted_and_read, max_examples=5000, derandomize=False)
    report(capsys, "validate (random)", counts)
    assert counts["accepted"] and counts["refused"]
