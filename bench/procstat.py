"""CPU time of this machine's processes, read from ``/proc`` (Linux), for the benches that say
where a tick's CPU went."""

from __future__ import annotations

import os
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def read(pid: int | str) -> tuple[str, list[str]] | None:
    """The command name and the fields after it of ``/proc/<pid>/stat``; None once it ended."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.index("(") + 1 : raw.rindex(")")], raw[raw.rindex(")") + 2 :].split()


def cpu_seconds(fields: list[str]) -> float:
    """User + system CPU seconds of a process, from ``read``'s fields."""
    return (int(fields[11]) + int(fields[12])) / _TICK


def cpu_of(pid: int) -> float:
    """User + system CPU seconds ``pid`` has used so far (0 once it ended)."""
    found = read(pid)
    return 0.0 if found is None else cpu_seconds(found[1])
