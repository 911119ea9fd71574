"""Tick identity (SPEC §4) and the placeholders filled from it (SPEC §2)."""

from __future__ import annotations

import hashlib
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from celery_durable_beat.ids import (
    TASK_ID_MAX,
    format_tick_instant,
    is_tick_id,
    jitter_offset_ms,
    manual_task_id,
    schedule_key,
    tick_task_id,
)
from celery_durable_beat.schedules.render import render, tick_isoformat

from ._support import ms

pytestmark = pytest.mark.unit

PROPERTY = settings(max_examples=200, deadline=None, database=None)
DIGEST_MS = ms("2026-11-30T03:00:00+00:00")


def sha8(name: str) -> str:
    return hashlib.sha1(name.lower().encode()).hexdigest()[:8]


def test_tick_task_id_of_the_spec_example() -> None:
    assert tick_task_id("nightly-digest", DIGEST_MS) == "nightly-digest@2026-11-30T03:00:00Z"


def test_tick_task_id_with_milliseconds() -> None:
    assert tick_task_id("nightly-digest", DIGEST_MS + 7) == (
        "nightly-digest@2026-11-30T03:00:00.007Z"
    )
    assert tick_task_id("a", DIGEST_MS + 250) == "a@2026-11-30T03:00:00.250Z"


@pytest.mark.parametrize(
    ("tick_ms", "text"),
    [
        (0, "1970-01-01T00:00:00Z"),
        (1, "1970-01-01T00:00:00.001Z"),
        (-1, "1969-12-31T23:59:59.999Z"),
        (ms("2026-03-08T03:00:00-04:00"), "2026-03-08T07:00:00Z"),
        (ms("2026-10-04T02:30:00+11:00"), "2026-10-03T15:30:00Z"),
    ],
)
def test_format_tick_instant(tick_ms: int, text: str) -> None:
    assert format_tick_instant(tick_ms) == text


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("nightly-digest", "nightly-digest"),
        ("Nightly-Digest", "nightly-digest"),  # lower-casing alone adds no suffix
        ("reports.v2_daily", "reports.v2_daily"),
        ("send invoices", "send-invoices-" + sha8("send invoices")),
        ("a  /  b", "a-b-" + sha8("a  /  b")),
        ("Ünïcode täsk", "-n-code-t-sk-" + sha8("Ünïcode täsk")),
        ("emoji🎉", "emoji--" + sha8("emoji🎉")),
    ],
)
def test_schedule_key(name: str, key: str) -> None:
    assert schedule_key(name) == key


def test_key_suffix_is_sha1_of_the_lower_cased_name() -> None:
    assert schedule_key("NIGHTLY") == "nightly"
    digest = hashlib.sha1(b"send invoices").hexdigest()
    assert schedule_key("Send Invoices") == f"send-invoices-{digest[:8]}"
    assert schedule_key("Send Invoices") == schedule_key("send invoices")


names = st.text(min_size=1, max_size=30)


@PROPERTY
@given(first=names, second=names)
def test_distinct_names_never_share_a_key(first: str, second: str) -> None:
    if first.lower() != second.lower():
        assert schedule_key(first) != schedule_key(second)
    else:
        assert schedule_key(first) == schedule_key(second)


@PROPERTY
@given(name=names, tick_ms=st.integers(0, 253_402_300_799_999))
def test_ids_are_safe_and_parse_back(name: str, tick_ms: int) -> None:
    task_id = tick_task_id(name, tick_ms)
    key, _, instant = task_id.partition("@")
    assert re.fullmatch(r"[a-z0-9._-]+", key)
    assert key == schedule_key(name)
    assert instant == format_tick_instant(tick_ms)
    assert ms(instant.replace("Z", "+00:00")) == tick_ms


def test_manual_ids_are_deterministic_with_an_idempotency_key() -> None:
    first = manual_task_id("Send Invoices", "req-42")
    assert first == manual_task_id("send invoices", "req-42")
    assert first != manual_task_id("Send Invoices", "req-43")
    key, _, rest = first.partition("@")
    assert key == schedule_key("Send Invoices")
    assert re.fullmatch(r"manual-[0-9a-f]{32}", rest)
    expected = hashlib.sha256(b"send invoices\x00req-42").hexdigest()[:32]
    assert rest == f"manual-{expected}"


def test_manual_ids_are_random_without_an_idempotency_key() -> None:
    ids = {manual_task_id("nightly-digest") for _ in range(50)}
    assert len(ids) == 50
    assert all(re.fullmatch(r"nightly-digest@manual-[0-9a-f]{32}", i) for i in ids)


@PROPERTY
@given(
    name=names,
    tick_ms=st.integers(0, 253_402_300_799_999),
    idempotency_key=st.none() | st.text(max_size=20),
)
def test_every_id_beat_makes_has_the_tick_id_shape(
    name: str, tick_ms: int, idempotency_key: str | None
) -> None:
    """Format and parse are one definition (``ids.py``): the worker's ``is_tick_id`` accepts
    every id ``tick_task_id`` and ``manual_task_id`` produce."""
    assert is_tick_id(tick_task_id(name, tick_ms))
    assert is_tick_id(manual_task_id(name, idempotency_key))


@pytest.mark.parametrize(
    "task_id",
    [
        "",
        "3f2b5c9e-1d4a-4b8e-9c2f-7a6d5e4b3c21",  # an ordinary Celery uuid
        "Nightly@2026-11-30T03:00:00Z",  # keys are lower-cased
        "@2026-11-30T03:00:00Z",
        "nightly@2026-11-30T03:00:00",
        "nightly@2026-11-30T03:00:00.07Z",
        "nightly@manual-abc",
        "nightly@manual-" + "A" * 32,
        "nightly@2026-11-30T03:00:00Z\n",
        "a b@2026-11-30T03:00:00Z",
    ],
)
def test_other_ids_do_not_have_the_tick_id_shape(task_id: str) -> None:
    assert not is_tick_id(task_id)


long_names = st.text(min_size=100, max_size=200)


@PROPERTY
@given(name=long_names, tick_ms=st.integers(0, 253_402_300_799_999), idem=st.text(max_size=20))
def test_every_id_fits_celerys_result_backend_column(name: str, tick_ms: int, idem: str) -> None:
    for task_id in (tick_task_id(name, tick_ms), manual_task_id(name, idem)):
        assert len(task_id) <= TASK_ID_MAX == 155
        assert is_tick_id(task_id)
    assert tick_task_id(name, tick_ms).endswith("@" + format_tick_instant(tick_ms))


def test_a_long_key_is_cut_and_ends_in_the_names_digest() -> None:
    name = "Nightly " + "x" * 180
    task_id = tick_task_id(name, DIGEST_MS)
    key, _, instant = task_id.partition("@")
    assert len(task_id) == 155 and instant == "2026-11-30T03:00:00Z"
    assert key == schedule_key(name)[: 155 - 1 - 20 - 9] + "-" + sha8(name)
    assert key.startswith(f"nightly-{'x' * 20}")
    assert tick_task_id(name.upper(), DIGEST_MS) == task_id  # names compare case-insensitively


def test_ids_that_fit_are_not_cut() -> None:
    name = "a" * (155 - 1 - 20)
    assert tick_task_id(name, DIGEST_MS) == f"{name}@2026-11-30T03:00:00Z"
    assert tick_task_id(name + "b", DIGEST_MS) != f"{name}b@2026-11-30T03:00:00Z"


@PROPERTY
@given(first=long_names, second=long_names)
def test_distinct_long_names_never_share_an_id(first: str, second: str) -> None:
    if first.lower() != second.lower():
        assert tick_task_id(first, DIGEST_MS) != tick_task_id(second, DIGEST_MS)


def test_manual_and_tick_ids_cannot_collide() -> None:
    assert "@manual-" not in tick_task_id("manual", 0)
    assert manual_task_id("x", "") != manual_task_id("x", "\x00")


@PROPERTY
@given(name=names, tick_ms=st.integers(0, 10**13), jitter=st.floats(0, 3600))
def test_jitter_offset_is_bounded_and_deterministic(name: str, tick_ms: int, jitter: float) -> None:
    offset = jitter_offset_ms(name, tick_ms, jitter)
    assert 0 <= offset <= round(jitter * 1000)
    assert offset == jitter_offset_ms(name, tick_ms, jitter)


def test_jitter_offset_edges() -> None:
    assert jitter_offset_ms("a", DIGEST_MS, 0) == 0
    assert jitter_offset_ms("a", DIGEST_MS, -5) == 0
    assert jitter_offset_ms("a", DIGEST_MS, 0.0001) == 0  # rounds to 0 ms
    offsets = {jitter_offset_ms("a", DIGEST_MS + i * 60_000, 60) for i in range(200)}
    assert len(offsets) > 150  # spread over the range, not a constant
    assert max(offsets) <= 60_000
    assert jitter_offset_ms("Nightly", DIGEST_MS, 60) == jitter_offset_ms("nightly", DIGEST_MS, 60)


# --- placeholders ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tick", "tz", "text"),
    [
        ("2026-03-08T03:00:00-04:00", "America/New_York", "2026-03-08T03:00:00-04:00"),
        ("2026-11-01T01:30:00-05:00", "America/New_York", "2026-11-01T01:30:00-05:00"),
        ("2026-11-01T01:30:00-04:00", "America/New_York", "2026-11-01T01:30:00-04:00"),
        ("2026-10-04T02:30:00+11:00", "Australia/Lord_Howe", "2026-10-04T02:30:00+11:00"),
        ("2026-04-05T01:45:00+10:30", "Australia/Lord_Howe", "2026-04-05T01:45:00+10:30"),
        ("2026-03-08T02:30:00+05:45", "Asia/Kathmandu", "2026-03-08T02:30:00+05:45"),
        ("2026-11-30T03:00:00.125+00:00", "UTC", "2026-11-30T03:00:00.125+00:00"),
        ("2026-11-30T03:00:00Z", "Europe/Berlin", "2026-11-30T04:00:00+01:00"),
        ("2026-11-01T01:30:00.500-05:00", "America/New_York", "2026-11-01T01:30:00.500-05:00"),
        ("2400-02-29T23:59:59.999+00:00", "UTC", "2400-02-29T23:59:59.999+00:00"),
    ],
)
def test_tick_isoformat(tick: str, tz: str, text: str) -> None:
    assert tick_isoformat(ms(tick.replace("Z", "+00:00")), tz) == text


def test_placeholders_are_rendered_in_nested_values() -> None:
    tick = ms("2026-11-01T01:30:00-05:00")  # second pass of the New York fold
    value = {
        "when": "{{scheduled_for}}",
        "ms": "{{scheduled_for_ms}}",
        "nested": [{"deep": ("at {{scheduled_for}} / {{scheduled_for_ms}}", 5)}, None, 1.5],
        "plain": "no {{placeholder}} here",
        "untouched": "plain text",
    }
    assert render(value, tick, "America/New_York") == {
        "when": "2026-11-01T01:30:00-05:00",
        "ms": str(tick),
        "nested": [{"deep": (f"at 2026-11-01T01:30:00-05:00 / {tick}", 5)}, None, 1.5],
        "plain": "no {{placeholder}} here",
        "untouched": "plain text",
    }
    assert render(["{{scheduled_for}}"], tick, "Asia/Kathmandu") == ["2026-11-01T12:15:00+05:45"]


def test_render_returns_copies() -> None:
    args = ["{{scheduled_for_ms}}", {"k": ["{{scheduled_for_ms}}"]}]
    rendered = render(args, 5000, "UTC")
    assert rendered == ["5000", {"k": ["5000"]}]
    assert args == ["{{scheduled_for_ms}}", {"k": ["{{scheduled_for_ms}}"]}]
    assert isinstance(render(("a",), 0, "UTC"), tuple)


def test_render_formats_the_instant_only_for_a_placeholder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Most ticks have no placeholder: formatting the instant in its zone is then skipped, and
    the copy is the same as ever."""
    from celery_durable_beat.schedules import render as render_module

    calls: list[int] = []

    def counting(tick_ms: int, tz: str) -> str:
        calls.append(tick_ms)
        return tick_isoformat(tick_ms, tz)

    monkeypatch.setattr(render_module, "tick_isoformat", counting)
    value = {"pad": "x" * 64, "list": [1, "{{ not a marker"]}
    rendered = render(value, 5000, "UTC")
    assert rendered == value and rendered is not value and rendered["list"] is not value["list"]
    assert calls == []
    assert render(["{{scheduled_for_ms}}", "{{scheduled_for}}"], 5000, "UTC") == [
        "5000",
        "1970-01-01T00:00:05+00:00",
    ]
    assert calls == [5000]  # once per render, however many placeholders
