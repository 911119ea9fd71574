"""How a schedule name sits in a URL path: one unambiguous reading of every path (issue #26).

Names may hold ``/`` and any other character (percent-encoded), so ``/schedules/a/pause`` could
be the action on ``a`` or the schedule ``a/pause``. Validation refuses names ending in an action
suffix (``ACTION_SUFFIXES``), and the routes here agree: the bare ``{name:schedule}`` never
captures such a name, so ``PUT …/a/pause`` is a wrong method on the action route (405), not the
creation of ``a/pause``. Both convertors match any character, the newline included (starlette's
``path`` convertor does not), so a name with a newline kept in an older store stays reachable.
"""

from __future__ import annotations

from starlette.convertors import Convertor, register_url_convertor

ACTION_SUFFIXES = ("pause", "resume", "trigger", "archive", "enqueue-events", "backfill")
"""The last path segments that name an action, never the end of a schedule's name."""


class AnyName(Convertor[str]):
    """Any non-empty text, ``/`` and newlines included, but no NUL (no store can hold one:
    PostgreSQL refuses it in text), so such a path is an unknown route (404), not a failure."""

    regex = r"(?s:[^\x00]+)"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


class ScheduleName(AnyName):
    """Any non-empty text that does not end in ``/<action>``: the bare schedule routes."""

    regex = r"(?s:(?!.*/(?:" + "|".join(ACTION_SUFFIXES) + r")\Z)[^\x00]+)"


def register_convertors() -> None:
    """Make ``{name:anyname}`` and ``{name:schedule}`` known to starlette; call it before the
    routes that use them are declared (starlette compiles a path when its route is made)."""
    register_url_convertor("anyname", AnyName())
    register_url_convertor("schedule", ScheduleName())
