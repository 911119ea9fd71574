"""The pure pieces behind the CLI: table layout, durations, cursors and one-line errors."""

from __future__ import annotations

import pytest

from celery_durable_beat.cli import EXIT_CODES, one_line
from celery_durable_beat.cli.format import duration_ms, table
from celery_durable_beat.control.views import decode_cursor, encode_cursor
from celery_durable_beat.exceptions import (
    ConfigError,
    ConfigProblem,
    InvalidArgument,
    ScheduleNotFound,
    StoreUnavailable,
)

pytestmark = pytest.mark.unit


def test_table_aligns_columns_and_marks_empty_cells() -> None:
    lines = table(("NAME", "NEXT"), [("a-long-name", None), ("b", "2026-03-08T03:00:00-04:00")])
    assert lines == [
        "NAME         NEXT",
        "a-long-name  -",
        "b            2026-03-08T03:00:00-04:00",
    ]
    assert table(None, []) == []


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (None, "-"),
        (0, "0ms"),
        (999, "999ms"),
        (1234, "1.2s"),
        (245_000, "4m05s"),
        (12_000_000, "3h20m"),
    ],
)
def test_durations(ms: int | None, text: str) -> None:
    assert duration_ms(ms) == text


@pytest.mark.parametrize("event_id", [1, 42, 10**15])
def test_cursor_round_trip_is_opaque(event_id: int) -> None:
    cursor = encode_cursor(event_id)
    assert str(event_id) not in cursor
    assert decode_cursor(cursor) == event_id


def test_errors_become_one_line_with_their_exit_code() -> None:
    problems = [
        ConfigProblem("a", "tz", 'tz "x" is not an IANA zone'),
        ConfigProblem("a", "task", "task is missing"),
    ]
    config = one_line(ConfigError(problems))
    assert "\n" not in config.message
    assert config.message == (
        '2 invalid schedule settings: schedule "a": tz "x" is not an '
        'IANA zone; schedule "a": task is missing'
    )
    assert config.exit_code == EXIT_CODES["invalid input"]
    assert one_line(ScheduleNotFound("x")).exit_code == EXIT_CODES["schedule not found"]
    assert one_line(InvalidArgument("bad")).exit_code == EXIT_CODES["invalid input"]
    store = one_line(StoreUnavailable("the store at a\nfailed"))
    assert (store.message, store.exit_code) == ("the store at a failed", 5)


def test_every_verb_is_documented_with_its_json() -> None:
    """docs/operations.md has a section per verb; keep it true when a verb is added."""
    from pathlib import Path

    from celery_durable_beat.cli import durable_beat

    docs = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    for verb in durable_beat.commands:
        assert f"`{verb}" in docs.split("## The Python API")[0], verb
        assert f"$ celery -A proj durable-beat {verb}" in docs, verb
