"""The round's cache of parsed definitions (``store/sql/round.py``): equal to parsing, bounded."""

from __future__ import annotations

import json

import pytest

from celery_durable_beat.model import Definition, MissedPolicy
from celery_durable_beat.schedules.spec import IntervalSpec
from celery_durable_beat.store.sql.round import DefinitionCache

pytestmark = pytest.mark.unit


def stored(**changes: object) -> str:
    definition = Definition(
        name="ignored", task="app.t", spec=IntervalSpec(60_000), kwargs={"k": [1, 2]}
    )
    data = {**definition.to_json(), **changes}
    return json.dumps(data)


def test_a_hit_equals_parsing_the_text_under_the_row_name() -> None:
    cache = DefinitionCache()
    text = stored(missed=MissedPolicy.BACKFILL.value)
    first = cache.parse("Alpha", text)
    second = cache.parse("beta", text)
    assert first == Definition.from_json("Alpha", json.loads(text))
    assert second == Definition.from_json("beta", json.loads(text))
    assert first.name == "Alpha" and second.name == "beta"
    assert cache.parse("Alpha", text) is first  # the same name: the kept object itself


def test_it_keeps_at_most_its_size_oldest_out_first() -> None:
    cache = DefinitionCache(size=2)
    texts = [stored(backfill_max=n) for n in (1, 2, 3)]
    for text in texts:
        cache.parse("s", text)
    assert list(cache._parsed) == texts[1:]
    assert cache.parse("s", texts[0]).backfill_max == 1  # parsed again, the oldest evicted
    assert len(cache._parsed) == 2


def test_an_unreadable_definition_raises_and_is_not_kept() -> None:
    cache = DefinitionCache()
    text = stored(format=99)
    for _ in range(2):
        with pytest.raises(ValueError, match="format 99"):
            cache.parse("s", text)
    assert cache._parsed == {}
    with pytest.raises(json.JSONDecodeError):
        cache.parse("s", "{not json")
