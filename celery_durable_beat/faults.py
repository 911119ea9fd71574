"""Fault injection for crash tests: the process kills (or stops) itself at a named point.

Off unless the test harness arms it: ``arm(plan)`` is the only way in, and nothing in the package
calls it. No environment variable, setting or file turns it on, so a stray variable on a
production host can never make beat kill itself; the reliability tests' app
(``tests/support/procapp.py``) arms the plan it is given by the test rig. Off, ``point(name)`` is
one dictionary lookup. A plan is a comma-separated list of ``<point>:<when>[:stop]``, where
``<when>`` is either an integer N (die at the N-th time the point is reached) or a probability in
(0, 1) (die each time with that chance), e.g.::

    arm("after_publish:3")
    arm("mid_batch:0.2,after_audit:0.1")
    arm("after_publish:2:stop")

With ``:stop`` the process does not die there: it stops itself (SIGSTOP), frozen mid-round as by
a long GC pause or a suspended VM, until the test sends SIGCONT; then the round goes on.

Points the dispatch round reaches (``dispatch.py``), in round order:

- ``mid_batch``: after each schedule's publishes, before the rest of the batch (some of the
  round's publishes may already be confirmed by the broker, none is audited);
- ``after_publish``: every publish of the round confirmed by the broker, before the audit write;
- ``after_audit``: the audit records and the advances committed (one transaction,
  ``Store.settle``), before ``replace`` revokes are sent.

Points the SQL store reaches (``store/sql/round.py``):

- ``fenced_write``: a fenced write (audit records, advances) is about to run its statements,
  its leader's checks behind it.

In-process tests can also *pause* the process at a point: ``paused_at(name, action)`` runs
``action`` each time ``name`` is reached, as if the process stalled there while ``action``
happened elsewhere (e.g. a new leader acquiring). Deterministic, with no sleeping.

Before dying the process writes one line ``durable-beat fault injected at <point>`` to stderr,
so a test can tell an injected crash from any other; before stopping, one line
``durable-beat fault stopped at <point>``.
"""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager

POINTS = frozenset({"mid_batch", "after_publish", "after_audit", "fenced_write"})
STOP = "stop"


def _entries(value: str) -> Iterator[tuple[str, str, float, bool]]:
    """``(part, point, when, stop)`` of each entry; raises ValueError for a malformed one."""
    for part in filter(None, (p.strip() for p in value.split(","))):
        name, sep, rest = part.partition(":")
        when, _, action = rest.partition(":")
        try:
            number = float(when) if sep else 1.0
        except ValueError:
            number = 0.0
        bad_number = number <= 0 or (number >= 1 and not number.is_integer())
        if name not in POINTS or bad_number or action not in ("", STOP):
            raise ValueError(
                f"fault plan: {part!r} is not <point>:<count or probability>[:stop]; "
                f"points are {', '.join(sorted(POINTS))}"
            )
        yield part, name, number, action == STOP


def parse(value: str) -> dict[str, float]:
    """``{point: when}``; ``when`` >= 1 is a count, below 1 a probability. Raises ValueError."""
    return {name: when for _, name, when, _ in _entries(value)}


def stops(value: str) -> frozenset[str]:
    """The points of the plan that stop the process (``:stop``) instead of killing it."""
    return frozenset(name for _, name, _, stop in _entries(value) if stop)


_PLAN: dict[str, float] = {}
_STOPS: set[str] = set()
_HITS: dict[str, int] = {}
_PAUSES: dict[str, Callable[[], None]] = {}


def arm(plan: str) -> None:
    """Arm ``plan`` in this process, replacing any earlier one and its hit counts; ``""``
    disarms. The test harness's switch, and the only one: raises ValueError for a bad plan,
    before anything is armed."""
    kills, stopping = parse(plan), stops(plan)
    _PLAN.clear()
    _PLAN.update(kills)
    _STOPS.clear()
    _STOPS.update(stopping)
    _HITS.clear()


def armed() -> dict[str, float]:
    """The plan in force (``{}`` when off), for a test to check what its process was given."""
    return dict(_PLAN)


@contextmanager
def paused_at(name: str, action: Callable[[], None]) -> Iterator[None]:
    """Within the block, run ``action`` each time ``name`` is reached (tests only)."""
    if name not in POINTS:
        raise ValueError(f"{name!r} is not a fault point; points are {', '.join(sorted(POINTS))}")
    _PAUSES[name] = action
    try:
        yield
    finally:
        _PAUSES.pop(name, None)


def point(name: str) -> None:
    """Die (or stop) here if the armed plan says so; a no-op when nothing is armed."""
    if _PAUSES:
        pause = _PAUSES.get(name)
        if pause is not None:
            pause()
    when = _PLAN.get(name)
    if when is None:
        return
    _HITS[name] = hits = _HITS.get(name, 0) + 1
    if (when >= 1 and hits == int(when)) or (when < 1 and random.random() < when):  # noqa: S311
        if name in _STOPS:
            os.write(2, f"durable-beat fault stopped at {name}\n".encode())
            os.kill(os.getpid(), signal.SIGSTOP)  # returns once the test sends SIGCONT
            return
        os.write(2, f"durable-beat fault injected at {name}\n".encode())
        os.kill(os.getpid(), signal.SIGKILL)
