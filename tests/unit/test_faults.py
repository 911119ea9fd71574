"""The fault-injection hook (``celery_durable_beat/faults.py``): off by default, exact when set."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from celery_durable_beat import faults
from tests.support.procs import REPO, wait_until


@pytest.mark.unit
def test_parse_counts_and_probabilities() -> None:
    assert faults.parse("after_publish:3, mid_batch:0.25,after_audit") == {
        "after_publish": 3.0,
        "mid_batch": 0.25,
        "after_audit": 1.0,
    }


@pytest.mark.unit
def test_stop_entries_stop_instead_of_killing() -> None:
    plan = "after_publish:2:stop, mid_batch:0.5"
    assert faults.parse(plan) == {"after_publish": 2.0, "mid_batch": 0.5}
    assert faults.stops(plan) == {"after_publish"}


@pytest.mark.unit
@pytest.mark.parametrize(
    "bad",
    [
        "nowhere:1",
        "after_audit:0",
        "after_audit:1.5",
        "mid_batch:-1",
        "mid_batch:x",
        "mid_batch:1:pause",
    ],
)
def test_parse_refuses_what_it_cannot_honour(bad: str) -> None:
    with pytest.raises(ValueError, match="DURABLE_BEAT_FAULT"):
        faults.parse(bad)


@pytest.mark.unit
def test_unset_points_do_nothing() -> None:
    for name in sorted(faults.POINTS):
        faults.point(name)  # this process has no DURABLE_BEAT_FAULT: still alive


@pytest.mark.integration  # a real process and a real SIGKILL
def test_the_process_kills_itself_at_the_nth_hit() -> None:
    code = (
        "from celery_durable_beat import faults\n"
        "for i in range(5):\n"
        "    print(i, flush=True)\n"
        "    faults.point('after_audit')\n"
    )
    env = {**os.environ, faults.ENV: "after_audit:3", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL
    assert done.stdout.split() == ["0", "1", "2"]
    assert "durable-beat fault injected at after_audit" in done.stderr


@pytest.mark.integration  # a real process, stopped and continued
def test_the_process_stops_itself_at_the_nth_hit_and_goes_on_after_sigcont() -> None:
    code = (
        "from celery_durable_beat import faults\n"
        "for i in range(4):\n"
        "    print(i, flush=True)\n"
        "    faults.point('after_publish')\n"
        "print('done', flush=True)\n"
    )
    env = {**os.environ, faults.ENV: "after_publish:2:stop", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # written just before it stops itself
        assert line == "durable-beat fault stopped at after_publish\n"
        wait_until(lambda: _state(proc.pid) == "T", 10, "the process to be stopped")
        os.kill(proc.pid, signal.SIGCONT)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert out.split() == ["0", "1", "2", "3", "done"]


def _state(pid: int) -> str:
    """The process's state letter in /proc (``T``: stopped)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]
