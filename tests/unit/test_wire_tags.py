"""What a templated Redis tick is written with (``publish/redis_wire.py``): a delivery tag as
kombu would make it, and every header of the tick its own."""

from __future__ import annotations

import uuid

import pytest

from celery_durable_beat.message import HEADER_STOCK_BEAT, TickMessage, tick_headers
from celery_durable_beat.model import Trigger
from celery_durable_beat.publish.redis_wire import _TICK_FIELDS, new_delivery_tag

pytestmark = pytest.mark.unit


def test_delivery_tags_are_distinct_version_4_uuids_in_kombu_s_text_form() -> None:
    tags = [new_delivery_tag() for _ in range(4000)]
    assert len(set(tags)) == len(tags)
    for tag in tags:
        parsed = uuid.UUID(tag)
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
        assert str(parsed) == tag  # lower-case, dashed: ``str(uuid4())``
    # Every variant digit occurs (the two random bits after the variant's ``10``).
    assert {tag[19] for tag in tags} == set("89ab")


def test_every_header_that_names_the_tick_is_written_per_tick() -> None:
    """A header of ``tick_headers`` missing from ``_TICK_FIELDS`` would be copied from the
    template's own tick: another schedule's ``periodic_task_name`` in django-celery-results, for
    one. Only stock beat's constant ``celery_beat_task`` may stay the template's."""
    message = TickMessage(
        schedule="s",
        task="t",
        args=(),
        kwargs={},
        options={},
        task_id="s@2026-01-01T00:00:00Z",
        tick_ms=0,
        trigger=Trigger.MANUAL,
        namespace="ns",  # every optional header present
    )
    spliced = {key for part, key in _TICK_FIELDS if part == "headers"}
    assert set(tick_headers(message)) - spliced == {HEADER_STOCK_BEAT}
