"""The delivery tag a templated Redis tick carries is what kombu would make: a version-4 UUID."""

from __future__ import annotations

import uuid

import pytest

from celery_durable_beat.publish.redis_wire import new_delivery_tag

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
