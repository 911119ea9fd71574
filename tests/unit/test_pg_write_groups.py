"""``runs/pg_direct.py``'s grouping of a batch of run-state writes into statements: each tick's
writes keep their order, a statement never holds one tick twice, and the flusher's usual mix
(claims' ``started`` and ends) becomes two statements."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from celery_durable_beat.runs.base import WriteIf
from celery_durable_beat.runs.pg_direct import _groups

pytestmark = pytest.mark.unit

Write = tuple[WriteIf, dict[str, Any]]


def write(kind: WriteIf, task_id: str, n: int = 0) -> Write:
    return kind, {"task_id": task_id, "n": n}


def shape(groups: list[tuple[WriteIf, list[dict[str, Any]]]]) -> list[tuple[str, list[str]]]:
    return [(kind.name, [v["task_id"] for v in rows]) for kind, rows in groups]


def test_writes_of_other_ticks_join_an_earlier_group_of_their_kind() -> None:
    writes = [
        write(WriteIf.ALWAYS, "a"),
        write(WriteIf.OWNER, "b"),
        write(WriteIf.ALWAYS, "c"),
        write(WriteIf.OWNER, "a"),
        write(WriteIf.ALWAYS, "d"),
        write(WriteIf.ALWAYS, "a"),
    ]
    assert shape(_groups(writes)) == [
        ("ALWAYS", ["a", "c", "d"]),
        ("OWNER", ["b", "a"]),
        ("ALWAYS", ["a"]),
    ]


def test_the_flushers_usual_batch_is_two_statements() -> None:
    writes = [write(WriteIf.ALWAYS if i % 3 else WriteIf.OWNER, f"t{i}") for i in range(30)]
    assert [kind for kind, _rows in _groups(writes)] == [WriteIf.OWNER, WriteIf.ALWAYS]


@given(
    st.lists(
        st.tuples(st.sampled_from(list(WriteIf)), st.sampled_from(["a", "b", "c", "d"])),
        max_size=60,
    )
)
def test_each_ticks_order_is_kept_and_no_statement_holds_a_tick_twice(
    drawn: list[tuple[WriteIf, str]],
) -> None:
    writes = [write(kind, task_id, n) for n, (kind, task_id) in enumerate(drawn)]
    groups = _groups(writes)
    assert sum(len(rows) for _kind, rows in groups) == len(writes)
    for kind, rows in groups:
        ids = [v["task_id"] for v in rows]
        assert len(ids) == len(set(ids))
        assert all(w[0] is kind for w in writes if w[1] in rows)
    applied = [(v["task_id"], v["n"]) for _kind, rows in groups for v in rows]
    for task_id in "abcd":
        mine = [n for t, n in applied if t == task_id]
        assert mine == sorted(mine)
