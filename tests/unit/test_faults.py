"""The fault-injection hook (``celery_durable_beat/faults.py``): off unless armed by the test
harness (``faults.arm``), never by a variable in the environment; exact when armed."""

from __future__ import annotations

import os
import re
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
    with pytest.raises(ValueError, match="fault plan"):
        faults.parse(bad)
    with pytest.raises(ValueError, match="fault plan"):
        faults.arm(bad)
    assert faults.armed() == {}  # a bad plan arms nothing


@pytest.mark.unit
def test_unarmed_points_do_nothing() -> None:
    assert faults.armed() == {}
    for name in sorted(faults.POINTS):
        faults.point(name)  # nothing armed in this process: still alive


@pytest.mark.unit
def test_arm_replaces_the_plan_and_an_empty_one_disarms() -> None:
    try:
        faults.arm("after_publish:3")
        faults.arm("mid_batch:2:stop")
        assert faults.armed() == {"mid_batch": 2.0}
        faults.point("after_publish")  # the earlier plan is gone: nothing happens
    finally:
        faults.arm("")
    assert faults.armed() == {}


STRAY_VARIABLES = {"DURABLE_BEAT_FAULT": "after_audit:1,after_publish:1,mid_batch:1"}
"""What an operator (or an old runbook) might leave set: the variable faults.py once read."""


@pytest.mark.unit
def test_no_variable_in_the_environment_arms_a_fault() -> None:
    """A production process with the old variable (or the harness's) set: every point reached,
    the package fully imported, and nothing kills or stops it."""
    code = (
        "import celery_durable_beat, celery_durable_beat.scheduler, celery_durable_beat.dispatch\n"
        "import celery_durable_beat.store.sql\n"
        "from celery_durable_beat import faults\n"
        "for _ in range(3):\n"
        "    for name in sorted(faults.POINTS):\n"
        "        faults.point(name)\n"
        "print('alive', flush=True)\n"
    )
    env = {**os.environ, **STRAY_VARIABLES, "BEAT_FAULT": "fenced_write:1", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "alive\n", "")


@pytest.mark.unit
def test_the_package_reads_no_variable_for_faults() -> None:
    """Only the harness arms: no module of the package names a fault variable or calls arm."""
    variable = re.compile(r"[\"'][A-Z_]*FAULT[\"']|faults\.arm\(")
    package = REPO / "celery_durable_beat"
    offenders = [
        str(path.relative_to(REPO))
        for path in package.rglob("*.py")
        if variable.search(path.read_text())
    ]
    assert offenders == []


@pytest.mark.integration  # a real process and a real SIGKILL
def test_the_process_kills_itself_at_the_nth_hit() -> None:
    code = (
        "from celery_durable_beat import faults\n"
        "faults.arm('after_audit:3')\n"
        "for i in range(5):\n"
        "    print(i, flush=True)\n"
        "    faults.point('after_audit')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
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
        "faults.arm('after_publish:2:stop')\n"
        "for i in range(4):\n"
        "    print(i, flush=True)\n"
        "    faults.point('after_publish')\n"
        "print('done', flush=True)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
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
