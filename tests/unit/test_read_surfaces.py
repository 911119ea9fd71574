"""The pure parts of showing stored values (``control/shown.py``, ``store/decode.py``, the CLI's
text): a value outside SPEC §2's bounds is named, never raised (issue #26)."""

from __future__ import annotations

import base64
import json

import pytest

from celery_durable_beat.cli.format import printable
from celery_durable_beat.control.shown import (
    Shown,
    payload_problem,
    seconds_problem,
    zone_problem,
)
from celery_durable_beat.control.views import decode_cursor
from celery_durable_beat.exceptions import InvalidArgument
from celery_durable_beat.schedules.bounds import name_problem
from celery_durable_beat.schedules.spec import CronSpec, IntervalSpec
from celery_durable_beat.store.decode import UNREADABLE_TASK, decode_definition


def _cursor(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize("event_id", [2**63, 10**30])
def test_a_cursor_past_bigint_names_the_cursor(event_id: int) -> None:
    with pytest.raises(InvalidArgument) as caught:
        decode_cursor(_cursor(f"h1.{event_id}"))
    assert caught.value.field == "cursor"
    assert decode_cursor(_cursor(f"h1.{2**63 - 1}")) == 2**63 - 1


@pytest.mark.parametrize("name", ["", "x" * 201, "a\x00b", "new\nline", "tab\t"])
def test_names_outside_the_bounds_have_a_problem(name: str) -> None:
    assert name_problem(name) is not None
    assert name_problem("nightly report/é") is None


@pytest.mark.parametrize("tz", ["Europe", "Mars/Base", "../etc", ""])
def test_zones_that_are_not_zones(tz: str) -> None:
    assert zone_problem(tz) is not None
    assert zone_problem("Europe/Berlin") is None


def test_instants_outside_the_years_are_named_not_raised() -> None:
    shown = Shown("Pacific/Kiritimati", IntervalSpec(30_000))
    assert shown.instant("start_at", 568_971_820_800_000) is None
    assert shown.instant("end_at", 253_402_300_799_000) is None  # year 10000 in +14:00
    assert shown.instant("next_tick", 1_767_225_600_000) == "2026-01-01T14:00:00+14:00"
    assert [p.field for p in shown.problems] == ["start_at", "end_at"]


def test_a_bad_zone_shows_instants_in_utc_and_plans_nothing() -> None:
    shown = Shown("Europe", CronSpec(("0", "3", "*", "*", "*"), "Europe"))
    assert shown.zone == "UTC" and not shown.plannable
    assert shown.planned("next", lambda: [1], []) == []
    assert [p.field for p in shown.problems] == ["tz", "next"]


def test_numbers_and_payloads() -> None:
    assert seconds_problem(1e308) is not None
    assert seconds_problem(float("nan")) is not None
    assert seconds_problem(30) is None
    deep: list[object] = []
    for _ in range(1000):
        deep = [deep]
    assert payload_problem(deep) is not None
    assert payload_problem({"x": float("inf")}) is not None
    assert payload_problem({"day": [1, 2]}) is None


@pytest.mark.parametrize(
    "stored",
    [
        "[" * 5000 + "]" * 5000,
        "not json",
        json.dumps({"format": 1}),
        json.dumps(
            {
                "format": 1,
                "task": "t",
                "schedule": {"kind": "cron", "fields": ["0", "3", "32", "*", "1"], "tz": "UTC"},
            }
        ),
    ],
)
def test_an_unreadable_definition_is_a_stand_in_with_a_reason(stored: str) -> None:
    definition, problem = decode_definition("x", stored)
    assert problem is not None and "\n" not in problem
    assert definition.task == UNREADABLE_TASK and not definition.enabled


def test_text_output_escapes_control_characters() -> None:
    assert printable("new\nline\x00") == "new\\nline\\x00"
    assert printable("café") == "café"
